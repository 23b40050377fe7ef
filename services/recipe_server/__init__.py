"""The recipe server: analysts publish recipes, devices fetch them with log proofs.

- `settings`: `SAGG_RECIPE_SERVER_*` configuration; `python -m services.recipe_server` runs it.
- `store`: recipes, log leaves and signed tree heads on `services.common.db` (SQLite/PostgreSQL).
- `provision`: creating (or checking) the DAP task on collector, leader and helper.
- `service`: publication (validation, provisioning, signing, logging) and the device reads.
- `app`: the FastAPI application.
"""
