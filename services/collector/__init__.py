"""The sagg collector service (DAP-09 §4.6, collector side); see `app` for its API."""
