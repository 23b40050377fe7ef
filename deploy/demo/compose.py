"""The docker-compose demo recipe (`deploy/docker/demo-recipe.json`, published by the compose
`provision` service and answered by its `devices` service): which of a few buckets a device is
in, one-hot, its batch size derived from the privacy claim by the accounting."""

from __future__ import annotations

from shared.recipe.accounting import required_batch_size
from shared.recipe.model import RecipeDraft

__all__ = ["demo_recipe"]

BUCKETS = 8


def demo_recipe() -> RecipeDraft:
    """The demo's question as a recipe: which of the buckets each device is in."""
    draft = RecipeDraft.model_validate(
        {
            "recipe_id": "demo.buckets",
            "version": 1,
            "analysis_id": "demo",
            "description": f"which of {BUCKETS} buckets a device is in (sagg up --demo)",
            "query": {"stream": "demo", "fields": ["bucket"], "selection": {"kind": "latest"}},
            "encoding": {
                "features": [
                    {
                        "kind": "categories",
                        "field": "bucket",
                        "values": [f"b{i}" for i in range(BUCKETS)],
                    }
                ]
            },
            "randomizer": {"name": "one_hot", "eps0": 2.0, "symmetric": True},
            "sampling_rate": 1.0,
            "min_batch_size": 1,
            "privacy": {"epsilon": 1.0, "delta": 1e-6, "analysis": "stronger_clones"},
        }
    )
    # B follows from the claim (the recipe server refuses a B that does not deliver it).
    needed = required_batch_size(draft.randomizer, draft.sampling_rate, draft.privacy)
    assert needed is not None  # eps0 = 2 reaches eps = 1 at a few thousand reports
    return RecipeDraft.model_validate({**draft.model_dump(), "min_batch_size": needed})
