"""The base of every service's settings: pydantic-settings from `SAGG_<SERVICE>_*` variables,
with secrets optionally read from files (Docker/compose secrets, `docker-compose.yml`).

A secret setting (a field named ``..._token``, ``..._secret``, ``..._keys`` or ``..._key_init``,
taskprov's shared `verify_key_init`) may instead be
given as ``<PREFIX><NAME>_FILE``, the path of a file holding it (trailing whitespace dropped).
`SecretFileSource` reads those files as a settings source below the environment, so nothing
is copied into ``os.environ``. Only those names: ``SIGNING_KEY_FILE`` and
``TOKEN_KEY_IDS_FILE`` are settings of their own.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsError,
)

__all__ = ["SECRET_FILE_SUFFIXES", "SecretFileSource", "ServiceSettings"]

#: Variable names that point at a secret's file: `<PREFIX><NAME>_FILE` for a secret `<NAME>`.
SECRET_FILE_SUFFIXES = ("_TOKEN_FILE", "_SECRET_FILE", "_KEYS_FILE", "_KEY_INIT_FILE")


class SecretFileSource(PydanticBaseSettingsSource):
    """Secret settings from the files their `..._FILE` variables name."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # Unused: `__call__` reads every secret at once.
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        prefix = str(self.config.get("env_prefix", ""))
        values: dict[str, Any] = {}
        for name in self.settings_cls.model_fields:
            target = f"{prefix}{name.upper()}"
            variable = f"{target}_FILE"
            if not variable.endswith(SECRET_FILE_SUFFIXES) or variable not in os.environ:
                continue
            if target in os.environ:
                raise SettingsError(f"set {target} or {variable}, not both")
            path = os.environ[variable]
            try:
                value = Path(path).read_text().strip()
            except OSError as exc:
                raise SettingsError(f"{variable}: cannot read {path}: {exc.strerror}") from None
            if not value:
                raise SettingsError(f"{variable}: {path} is empty")
            values[name] = value
        return values


class ServiceSettings(BaseSettings):
    """What every service's settings class derives from: init arguments (`sagg serve`'s
    flags) override the environment, which overrides secret files."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, SecretFileSource(settings_cls)
