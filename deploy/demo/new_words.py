"""New words with the Sequence Fragment Puzzle (002 §4.3 and §6: Apple's new-word discovery).

Each device holds a few typed words from the last day, half of them coined strings no
dictionary holds (`client_sdk.datagen.NEW_WORDS`), half common English words (`WORDS`), and
answers with one at random. Nobody tells the devices or the collector which strings exist: the
device pads its word to `LENGTH` characters, hashes it to the 8-bit puzzle piece h(s), picks one
fragment position l and sends a CMS report of h(s) || s[l : l + 2] and a CMS report of s, as
one `Prio3MultiHotHistogram` measurement (`shared.dp.vdaf_mapping`: word block, then the
position's fragment rows). The collector splits the aggregate into the word sketch and one
fragment sketch per position, keeps the `TOP` fragments of each position, joins those that
carry the same puzzle piece into candidate words and estimates the candidates with the word
sketch (002 Algorithm 10); the words whose estimates clear the Bonferroni threshold are the
discoveries, compared here with the words the devices really sent.

Parameters, and why they are not 002's: 002 deploys (k, m) = (k', m') = (2048, 1024) and (eps,
eps') = (2, 6) over length-10 strings for millions of devices; that report is 12.6 million
coordinates (about 200 MB as a Prio3 share, `vdaf_mapping`), and at a few thousand devices its
sketches would be noise. Here: strings of `LENGTH` = 6 over a-z and the pad (three 2-character
fragments; every word of the data fits), word sketch (eps, k, m) = (3, 16, 64), fragment sketch
(eps', k', m') = (5, 16, 32): 2624 coordinates (46 kB per report; Prio3 sharding is most of a
device's cost). Measured on this 2-core machine while other work shared it: 3000 devices enrol,
answer and upload in 99 s, the whole analysis takes 112 s (750 devices at the small scale: 42
s); the 3000 devices are what discovering the top few words needs. eps + eps' = 8 is 002's
total, split towards the word sketch, whose estimates decide what is reported at this population
size; k m = 1024 and k' m' = 512 keep hash collisions with the most popular words below the
privacy noise on average. `TOP` = 1000 of the 256 x 27^2 (puzzle, fragment) pairs per position
lets the fragments of words used by a few percent of the devices through; the puzzle piece (and
our check that a candidate hashes to the piece that anchored it) keeps the candidates to tens.

Privacy: each report is (eps + eps')-LDP (002 Theorem 4.5); amplification by aggregation does not
improve on that at eps0 = 8 and a few thousand reports, so the recipe claims the local
guarantee (computed by the accounting: its B is then 1) and the population is sized for
utility (`POPULATION`: 3000 devices, 750 at the tests' small scale).

The checks: the most common words (three at full scale, one at small) are discovered, and the
discovered words that devices really sent have estimates within simultaneous intervals of their
counts. False discoveries are listed, not failed: a string nobody sent whose word-sketch
buckets collide with popular words in several of the k rows can clear the threshold, the
heavy tail of CMS collisions that 002's millions of devices and k m = 2^21 make negligible.
"""

from __future__ import annotations

from dataclasses import replace

from client_sdk.datagen import NEW_WORDS, WORDS, generate_events
from deploy.demo.framework import (
    AnalysisReport,
    Check,
    DemoContext,
    claim_check,
    coverage_check,
    exact_check,
)
from services.collector.analysis import Item, to_table
from shared.recipe.model import PrivacyClaim, SfpRandomizer, SketchParams

__all__ = ["run", "sfp_randomizer"]

NAME = "new_words"
LENGTH = 6
ALPHABET = "abcdefghijklmnopqrstuvwxyz "
WORD_SKETCH = SketchParams(eps0=3.0, k=16, m=64)
FRAGMENT_SKETCH = SketchParams(eps0=5.0, k=16, m=32)
TOP = 1000
#: Scale name -> (devices, how many of the most common words must be discovered); other
#: scales take five times their device floor and one word.
POPULATION = {"full": (3000, 3), "small": (750, 1)}


def sfp_randomizer(seed: int) -> SfpRandomizer:
    """The demo's SFP parameters (module docstring), with hash seeds from the demo seed."""
    return SfpRandomizer(
        length=LENGTH,
        fragment_length=2,
        alphabet=ALPHABET,
        word=WORD_SKETCH.model_copy(update={"seed": seed}),
        fragment=FRAGMENT_SKETCH.model_copy(update={"seed": seed + 1}),
        top=TOP,
    )


def _row(item: Item, truth: dict[str, float]) -> str:
    sent = truth.get(item.label, 0.0) > 0
    kind = "dictionary" if item.label in WORDS else "new" if sent else "not sent (false)"
    return (
        f"  {item.label:<8} {item.estimate:8.1f}  [{item.ci_low:7.1f}, {item.ci_high:7.1f}]"
        f"  {truth.get(item.label, 0.0):6.0f}  {kind}"
    )


def run(ctx: DemoContext) -> AnalysisReport:
    report = AnalysisReport(NAME, "New words: Sequence Fragment Puzzle (002 §4.3)")
    randomizer = sfp_randomizer(ctx.seed)
    claim = PrivacyClaim(
        epsilon=randomizer.local_epsilon, delta=ctx.scale.delta, analysis="stronger_clones"
    )
    draft = ctx.draft(
        {
            "recipe_id": ctx.recipe_id(NAME),
            "version": 1,
            "analysis_id": f"demo.{NAME}",
            "description": "strings devices type that no dictionary has (SFP, one word a day)",
            "query": {
                "stream": "keyboard_words",
                "fields": ["word"],
                "selection": {"kind": "random_event", "window_seconds": 86400},
            },
            "encoding": {"features": [{"kind": "string", "field": "word"}]},
            "randomizer": randomizer.model_dump(),
            "sampling_rate": 1.0,
            "privacy": claim.model_dump(),
        }
    )
    verified, published = ctx.publish(draft)
    recipe = verified.recipe
    report.lines.append(
        f"recipe {recipe.recipe_id} v{recipe.version}: signed, logged (leaf "
        f"{published['leaf_index']}), task {recipe.task.task_id} "
        f"({recipe.task.vdaf.describe()}), local epsilon {randomizer.local_epsilon:g} = "
        f"{WORD_SKETCH.eps0:g} (word) + {FRAGMENT_SKETCH.eps0:g} (fragment), "
        f"B = {recipe.min_batch_size} from the claim"
    )
    policy = ctx.policy([recipe])
    simulator = ctx.simulator(policy)
    rng = ctx.rng(NAME)
    count, must = POPULATION.get(ctx.scale.name, (5 * ctx.scale.min_devices, 1))
    devices = ctx.population(
        simulator,
        policy,
        recipe.query.stream,
        count,
        lambda now: generate_events("new_words", recipe, rng, now),
    )
    try:
        result = ctx.answer_and_collect(verified, simulator, devices)
    finally:
        simulator.close(devices)
    analysis, truth = result.analysis, result.truth
    report.lines += result.summary.lines()
    report.lines += ["", to_table(analysis), ""]

    found = {it.label for it in analysis.items}
    ranked = sorted(truth, key=lambda w: -truth[w])
    true_items = tuple(it for it in analysis.items if truth.get(it.label, 0.0) > 0)
    false_items = [it for it in analysis.items if truth.get(it.label, 0.0) == 0]
    report.lines.append("  word     estimate  95% CI              truth  kind")
    report.lines += [_row(it, truth) for it in analysis.items]
    new_found = [it.label for it in true_items if it.label in NEW_WORDS]
    false_words = [it.label for it in false_items]
    false_text = ", ".join(false_words)
    report.lines.append(
        f"discovered {len(analysis.items)} words, {len(new_found)} of them new "
        f"({', '.join(new_found) or 'none'}); {len(false_items)} false discoveries"
        + (f" ({false_text}: sketch hash collisions)" if false_items else "")
    )
    missed = [w for w in ranked[:10] if w not in found]
    report.lines.append(
        "most common words not discovered: "
        + (", ".join(f"{w} ({truth[w]:.0f})" for w in missed) or "none")
    )

    # Mark the false discoveries' zero truth on the chart too.
    chart, table = ctx.write(NAME, analysis, {**truth, **dict.fromkeys(false_words, 0.0)})
    report.charts.append(chart)
    report.files.append(table)
    top = ranked[:must]
    report.checks.append(
        Check(
            f"the {must} most common words are discovered",
            set(top) <= found,
            f"{', '.join(top)}: " + ", ".join("found" if w in found else "missed" for w in top),
        )
    )
    report.checks.append(
        coverage_check(
            "SFP estimates of the discovered words vs the words sent",
            replace(analysis, items=true_items),
            truth,
        )
    )
    report.checks += [exact_check(result), claim_check(result)]
    return report
