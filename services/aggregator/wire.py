"""What differs between a DAP-09 and a DAP-19 task below the HTTP routes: one `Wire` per
version, chosen by `TaskDefinition.dap` when the task is loaded (digest dap-19.md §15).

Everything else (the checks, the VDAF, the datastore, the drivers' bookkeeping) is shared.
The wire facts the client shares (`shared.dap.version`, whose `Dap09Wire` / `Dap19Wire` these
extend) are:
- times: sagg stores and compares every time in seconds; a DAP-19 `Time` counts
  `time_precision` units (DAP-19 §4.1.1), converted at the wire with `units` / `seconds`. A
  unit is a whole bucket, so `seconds(units(t)) == t` for every stored time, and DAP-09's
  `units` is the identity (never the client's rounding `report_time`);
- input shares: the HPKE info label, the AAD (DAP-19 binds the provisioned TaskConfiguration
  bytes, DAP-19 §4.4.2) and the PlaintextInputShare (DAP-19's payload is never empty);
- VDAF application context: none for VDAF-08, "dap-19" || task_id for VDAF-20 (digest §10).

What only the aggregators need is added here:
- the upload's method and media type;
- report lifetime: DAP-09's `task_expiration` vs DAP-19's `task_interval` extension;
- report extensions: DAP-19's ordering rules and the public list (`check_report_extensions`);
  sagg's token and recipe binding stay private extensions in each aggregator's own share
  (`shared.dap.extensions`), so they are the supported private types of DAP-19 too, and no
  public extension is supported;
- per-report errors: sagg's datastore speaks DAP-09's PrepareError; DAP-19's ReportError is
  translated at the codec boundary (digest §1.2: byte 7 differs, never cast).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from shared.dap import messages as m09
from shared.dap import messages19 as m19
from shared.dap.extensions import KNOWN_EXTENSIONS
from shared.dap.version import Dap09Wire, Dap19Wire

#: DAP-09 PrepareError -> DAP-19 ReportError (digest §1.2, §6.5): the lifetime errors became
#: report_dropped, and -19 has no batch_saturated (a full leader-selected batch drops it).
REPORT_ERROR_OF: Final = {
    m09.PrepareError.BATCH_COLLECTED: m19.ReportError.BATCH_COLLECTED,
    m09.PrepareError.REPORT_REPLAYED: m19.ReportError.REPORT_REPLAYED,
    m09.PrepareError.REPORT_DROPPED: m19.ReportError.REPORT_DROPPED,
    m09.PrepareError.HPKE_UNKNOWN_CONFIG_ID: m19.ReportError.HPKE_UNKNOWN_CONFIG_ID,
    m09.PrepareError.HPKE_DECRYPT_ERROR: m19.ReportError.HPKE_DECRYPT_ERROR,
    m09.PrepareError.VDAF_PREP_ERROR: m19.ReportError.VDAF_VERIFY_ERROR,
    m09.PrepareError.BATCH_SATURATED: m19.ReportError.REPORT_DROPPED,
    m09.PrepareError.TASK_EXPIRED: m19.ReportError.REPORT_DROPPED,
    m09.PrepareError.INVALID_MESSAGE: m19.ReportError.INVALID_MESSAGE,
    m09.PrepareError.REPORT_TOO_EARLY: m19.ReportError.REPORT_TOO_EARLY,
}

#: The other way, for the helper's answers the leader stores; the two errors -19 added have
#: no DAP-09 code and are stored as invalid_message under their own counter reason.
PREPARE_ERROR_OF: Final = {
    m19.ReportError.BATCH_COLLECTED: m09.PrepareError.BATCH_COLLECTED,
    m19.ReportError.REPORT_REPLAYED: m09.PrepareError.REPORT_REPLAYED,
    m19.ReportError.REPORT_DROPPED: m09.PrepareError.REPORT_DROPPED,
    m19.ReportError.HPKE_UNKNOWN_CONFIG_ID: m09.PrepareError.HPKE_UNKNOWN_CONFIG_ID,
    m19.ReportError.HPKE_DECRYPT_ERROR: m09.PrepareError.HPKE_DECRYPT_ERROR,
    m19.ReportError.VDAF_VERIFY_ERROR: m09.PrepareError.VDAF_PREP_ERROR,
    m19.ReportError.INVALID_MESSAGE: m09.PrepareError.INVALID_MESSAGE,
    m19.ReportError.REPORT_TOO_EARLY: m09.PrepareError.REPORT_TOO_EARLY,
    m19.ReportError.UNKNOWN_VERIFICATION_KEY_ID: m09.PrepareError.INVALID_MESSAGE,
    m19.ReportError.UNSUPPORTED_EXTENSION: m09.PrepareError.INVALID_MESSAGE,
}

#: The verification key id of a task's one verify key. DAP-19 §4.5.3.1 lets tasks hold several;
#: a sagg task holds one, fixed at provisioning, and taskprov derives one with id 0 (digest §16
#: item 8), so leader and helper agree on 0 without a field.
VERIFICATION_KEY_ID: Final = 0


@dataclass(frozen=True, slots=True)
class Wire09(Dap09Wire):
    """A DAP-09 task (`Dap09Wire`), with its upload route and `task_expiration`."""

    task_expiration: int | None
    #: The upload's method and media type (DAP-09 §4.4.2).
    upload_method: str = "PUT"
    upload_media_type: str = m09.MEDIA_REPORT

    def is_upload_media_type(self, content_type: str) -> bool:
        return content_type.split(";", maxsplit=1)[0].strip().lower() == self.upload_media_type

    def extension_error(
        self, public_extensions: tuple[m09.Extension, ...], share: m09.PlaintextInputShare
    ) -> m19.ReportError | None:
        """DAP-09 has no public extensions; its private ones are judged by
        `shared.dap.extensions.decode_extensions` alone."""
        return None

    @property
    def lifetime_s(self) -> tuple[int | None, int | None]:
        """The first and the last report second the task accepts (None: no bound): DAP-09 has
        an expiration only."""
        return None, self.task_expiration


@dataclass(frozen=True, slots=True)
class Wire19(Dap19Wire):
    """A DAP-19 task (`Dap19Wire`), with its upload route, extension rules and
    `task_interval`."""

    #: The upload's method and media type (DAP-19 §4.4.2, §9.1).
    upload_method: str = "POST"
    upload_media_type: str = m19.MEDIA_UPLOAD_REQ

    def is_upload_media_type(self, content_type: str) -> bool:
        return m19.media_type_message(content_type) == "upload-req"

    def extension_error(
        self, public_extensions: tuple[m09.Extension, ...], share: m09.PlaintextInputShare
    ) -> m19.ReportError | None:
        """DAP-19's rules (DAP-19 §4.4.2, §4.5.3.4): order, a type in both lists, and only
        sagg's private extensions supported."""
        error = m19.check_report_extensions(public_extensions, share.extensions, KNOWN_EXTENSIONS)
        if error is None and public_extensions:
            return m19.ReportError.UNSUPPORTED_EXTENSION
        return error

    @property
    def lifetime_s(self) -> tuple[int | None, int | None]:
        """The first and the last report second the task accepts (None: no bound): the
        seconds of `task_interval`'s whole time_precision units (DAP-19 §4.2)."""
        interval = self.config.task_interval
        if interval is None:
            return None, None
        return self.seconds(interval.start), self.seconds(interval.end) - 1


Wire = Wire09 | Wire19
