"""Pieces every sagg service shares: clock, problem documents, auth, database."""
