"""The analysis chart: a valid PNG of sane size, with or without truth, many items capped."""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

import numpy as np

from services.collector.analysis import Analysis, Collection, analyze, item_labels
from services.collector.charts import DEFAULT_MAX_BARS, _drawable, write_chart
from shared.dp.randomizers.onehot import OneHotRandomizer as DpOneHot
from shared.recipe.model import RecipeDraft
from tests.recipe.helpers import draft_json

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert data.endswith(b"IEND\xaeB`\x82")  # the IEND chunk and its CRC: not truncated
    return int(width), int(height)


def analysed(recipe: RecipeDraft, n: int, seed: int) -> tuple[Analysis, dict[str, float]]:
    d = recipe.encoding.dimension
    rng = np.random.default_rng(seed)
    p = 1 / np.arange(1, d + 1) ** 1.2
    idx = rng.choice(d, size=n, p=p / p.sum())
    assert recipe.randomizer.name == "one_hot"
    r = DpOneHot(recipe.randomizer.eps0, d, recipe.randomizer.symmetric)
    agg = r.randomize(idx, rng).sum(axis=0)
    analysis = analyze(recipe, Collection(n, tuple(int(v) for v in agg), (0, 3600)))
    labels = item_labels(recipe.encoding)
    truth = {labels[i]: float(c) for i, c in enumerate(np.bincount(idx, minlength=d))}
    return analysis, truth


def small_recipe() -> RecipeDraft:
    return RecipeDraft.model_validate(
        draft_json(
            query={"stream": "s", "fields": ["word"], "selection": {"kind": "latest"}},
            cohorts=[],
            encoding={
                "features": [
                    {"kind": "categories", "field": "word", "values": [f"w{i}" for i in range(12)]}
                ]
            },
        )
    )


def test_chart_is_a_valid_png_with_truth(tmp_path: Path) -> None:
    analysis, truth = analysed(small_recipe(), 6000, 1)
    path = write_chart(analysis, tmp_path / "chart.png", truth)
    assert path == tmp_path / "chart.png"
    width, height = png_size(path)
    assert 500 <= width <= 1700 and 400 <= height <= 700
    assert 10_000 < path.stat().st_size < 1_000_000
    # The truth markers are drawn: the same chart without them is a different image.
    bare = write_chart(analysis, tmp_path / "bare.png")
    assert bare.read_bytes() != path.read_bytes()


def test_chart_of_many_items_is_capped(tmp_path: Path) -> None:
    recipe = RecipeDraft.model_validate(draft_json())  # 000's (age, 3-gram): 238 items
    analysis, truth = analysed(recipe, 8000, 2)
    assert len(analysis.items) > DEFAULT_MAX_BARS
    width, height = png_size(write_chart(analysis, tmp_path / "many.png", truth))
    assert width <= 1600 and height <= 1600
    short = write_chart(analysis, tmp_path / "few.png", max_bars=5)
    assert png_size(short)[1] < height


def test_chart_of_a_plain_task(tmp_path: Path) -> None:
    analysis = analyze(None, Collection(10, (3, 0, 7)))
    width, height = png_size(write_chart(analysis, tmp_path / "raw.png"))
    assert width > 0 and height > 0


def test_labels_the_font_cannot_draw_are_spelled_out(tmp_path: Path) -> None:
    """Emoji the default font lacks become their Unicode names, without a glyph warning."""
    recipe = RecipeDraft.model_validate(
        draft_json(
            query={"stream": "s", "fields": ["emoji"], "selection": {"kind": "latest"}},
            cohorts=[],
            encoding={
                "features": [{"kind": "categories", "field": "emoji", "values": ["🤣", "👍", "a"]}]
            },
            randomizer={"name": "one_hot", "eps0": 2.0, "symmetric": True},
        )
    )
    analysis, truth = analysed(recipe, 500, 3)
    assert _drawable("🤣") == "rolling on the floor laughing" and _drawable("a b") == "a b"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_chart(analysis, tmp_path / "emoji.png", truth)
    assert png_size(tmp_path / "emoji.png")[0] > 100
