"""Recipes for tests: 000 appendix B's (age, 3-gram) example, completed like the server does."""

from __future__ import annotations

from typing import Any

from shared.b64url import b64url_encode
from shared.dap.ids import TaskId
from shared.dap.messages import HpkeConfig, HpkeConfigList
from shared.recipe.accounting import expected_vdaf
from shared.recipe.model import Recipe, RecipeDraft, RecipeTask, TokenIssuerRef

PREFIXES = [["hello", "world"], ["i", "got"], ["how", "are"]]
KNOWN = ["a", "b", "c", "d", "e", "f", "g", "h", "world"]


def draft_json(**overrides: Any) -> dict[str, Any]:
    """000 Figure 4: the joint histogram of bucketed age and 3-grams over a prefix tree."""
    doc: dict[str, Any] = {
        "recipe_id": "keyboard.ngram3-age",
        "version": 1,
        "analysis_id": "keyboard.ngrams",
        "description": "popular 3-grams whose 2-gram prefix is known, joined with age",
        "query": {
            "stream": "keyboard",
            "fields": ["age", "typed_ngrams"],
            "selection": {
                "kind": "random_ngram",
                "field": "typed_ngrams",
                "n": 3,
                "window_seconds": 7 * 86400,
            },
        },
        "cohorts": [{"field": "locale", "values": ["en_US", "fr_FR"]}],
        "encoding": {
            "features": [
                {"kind": "buckets", "field": "age", "boundaries": [20, 30, 40, 50, 60, 70, 80]},
                {
                    "kind": "ngram",
                    "field": "typed_ngrams",
                    "n": 3,
                    "prefixes": PREFIXES,
                    "known_tokens": KNOWN,
                },
            ]
        },
        "randomizer": {"name": "one_hot", "eps0": 1.0, "symmetric": True},
        "sampling_rate": 0.5,
        "min_batch_size": 5000,
        "privacy": {"epsilon": 1.0, "delta": 1e-8, "analysis": "stronger_clones"},
    }
    doc.update(overrides)
    return doc


def sfp_randomizer(
    word: tuple[float, int, int],
    fragment: tuple[float, int, int],
    *,
    length: int = 6,
    top: int = 50,
) -> dict[str, Any]:
    """An `sfp` randomizer of a recipe draft over lower-case words: `word` and `fragment` are
    each sketch's (eps0, k, m); fragments of two characters."""
    (we, wk, wm), (fe, fk, fm) = word, fragment
    return {
        "name": "sfp",
        "length": length,
        "fragment_length": 2,
        "alphabet": "abcdefghijklmnopqrstuvwxyz ",
        "word": {"eps0": we, "k": wk, "m": wm, "seed": 1},
        "fragment": {"eps0": fe, "k": fk, "m": fm, "seed": 2},
        "top": top,
    }


def hpke_list(seed: int = 1) -> str:
    config = HpkeConfig(seed, 0x20, 1, 1, bytes([seed]) * 32)
    return b64url_encode(HpkeConfigList((config,)).encode())


def complete(draft: RecipeDraft, task_id: str | None = None) -> Recipe:
    task = RecipeTask(
        task_id=task_id or TaskId.random().to_b64url(),
        leader="https://leader.example",
        helper="https://helper.example",
        vdaf=expected_vdaf(draft.randomizer, draft.encoding),
        time_precision=3600,
        leader_hpke_configs=hpke_list(1),
        helper_hpke_configs=hpke_list(2),
    )
    issuer = TokenIssuerRef(url="https://issuer.example", key_ids=(b64url_encode(b"\x07" * 32),))
    return draft.complete(task, issuer)


def example_recipe(**overrides: Any) -> Recipe:
    return complete(RecipeDraft.model_validate(draft_json(**overrides)))
