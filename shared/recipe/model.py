"""The recipe: what a device needs to decide whether and how to answer a query.

A recipe (000 §4.1 and appendix B; 001 §4.1) names

- itself (`recipe_id`, `version`) and its analysis (`analysis_id`, the prefix of collection ids);
- the query: which data stream, which fields, which selection (e.g. 000's running example: "a
  random 3-gram typed this week whose 2-gram prefix is in this prefix tree");
- the non-sensitive cohort fields the device may append to the collection id (000 §4.1);
- the encoding of the query output as a one-hot vector: a tuple of features, each with its
  bucketing rule, OOV and end tokens, and for n-grams a prefix tree plus known tokens
  (000 appendix B; `Encoding.dimension` is the product of the feature sizes); or, for the
  Sequence Fragment Puzzle (002 §4.3), one string feature that the `sfp` randomizer sketches;
- the local randomizer and its parameters (one of `shared.dp.randomizers`);
- the sampling rate q, the minimum batch size B, and the aggregate (epsilon, delta) claimed for
  them (001 §4.1: "which allow the client device to verify that the protocol satisfies DP");
- optionally the noise each aggregator adds to its aggregate share (004 §5: a DP policy is
  client randomization, aggregator randomization, or both); the claim may rest on either;
- the DAP task (id, VDAF, leader and helper with their HPKE configs, time precision, expiry) and
  the token issuer (001 §4.1: "the recipe also contains the public keys for the servers");
- optionally the rate validation both aggregators enforce (001 §4.8): the analyst's population
  estimate and the expected reports per time bucket derived from it (`shared.recipe.rate`),
  which every parse of a recipe re-derives, so a device audits it.

`RecipeDraft` is what an analyst submits: the same, minus what the recipe server fills in on
publication (the task id and the aggregators' HPKE configs, by default the token issuer).

The models are strict (unknown members refused, values frozen), so that the canonical encoding
of a parsed recipe is the encoding that was signed (see `shared.recipe.signing`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from shared.b64url import b64url_decode
from shared.codec import DecodeError
from shared.dap.extensions import token_policy_for_issuer
from shared.dap.ids import TaskId
from shared.dap.messages import HpkeConfigList
from shared.dap.messages19 import TaskConfiguration
from shared.dap.task import VDAF_OF_DAP, AggregatorNoise, DapVersion, RateValidation, TokenPolicy
from shared.dap.taskprov import task_id_of
from shared.dap.vdaf_codepoints import vdaf_spec
from shared.dp.amplification import MAX_B, Analysis
from shared.dp.randomizers.cms import CountMeanSketch
from shared.dp.randomizers.sfp import PUZZLE_RANGE, SequenceFragmentPuzzle
from shared.dp.vdaf_mapping import sfp_length
from shared.recipe.rate import expected_reports_per_bucket
from shared.vdaf.spec import VdafSpec, VdafVersion

#: The `format` member of every recipe; a device refuses formats it does not know.
RECIPE_FORMAT: Final = "sagg-recipe/1"


__all__ = [
    "MAX_DIMENSION",
    "BitPushingRandomizer",
    "BucketFeature",
    "CategoryFeature",
    "CmsRandomizer",
    "CohortField",
    "DraftTask",
    "Encoding",
    "Feature",
    "HcmsRandomizer",
    "IntegerFeature",
    "LatestValueSelection",
    "NgramFeature",
    "OneHotRandomizer",
    "PrivacyClaim",
    "Query",
    "RandomEventSelection",
    "RandomNgramSelection",
    "Randomizer",
    "RateEstimate",
    "SfpRandomizer",
    "SketchParams",
    "StringFeature",
    "Recipe",
    "RecipeDraft",
    "RecipeRateValidation",
    "RecipeTask",
    "Selection",
    "TokenIssuerRef",
]

#: Largest one-hot dimension a recipe may ask for (the VDAF length limit of `VdafSpec`).
MAX_DIMENSION = 1_000_000

Identifier = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,127}$")]
FieldName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")]
Token = Annotated[str, StringConstraints(min_length=1, max_length=256)]
HttpUrl = Annotated[str, StringConstraints(pattern=r"^https?://[^\s]+$", max_length=2048)]
#: Seconds; up to a year.
Window = Annotated[int, Field(ge=1, le=366 * 86400)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _unique(values: Sequence[object], what: str) -> None:
    if len(set(values)) != len(values):
        raise ValueError(f"{what} must not repeat")


# --- query (000 §4.1, appendix B "query") --------------------------------------------------------


class RandomEventSelection(_Frozen):
    """One event of the stream drawn uniformly from the last `window_seconds`."""

    kind: Literal["random_event"] = "random_event"
    window_seconds: Window


class RandomNgramSelection(_Frozen):
    """000 §4.1: a random n-gram of `field` typed within the window whose (n-1)-gram prefix is in
    the encoding's prefix tree; if none qualifies, a random n-gram (000 footnote 3: sending
    nothing would itself disclose)."""

    kind: Literal["random_ngram"] = "random_ngram"
    field: FieldName
    n: int = Field(ge=1, le=8)
    window_seconds: Window


class LatestValueSelection(_Frozen):
    """The most recent value of the fields (e.g. a device property such as bucketed age)."""

    kind: Literal["latest"] = "latest"


Selection = Annotated[
    RandomEventSelection | RandomNgramSelection | LatestValueSelection,
    Field(discriminator="kind"),
]


class Query(_Frozen):
    stream: Identifier
    fields: tuple[FieldName, ...] = Field(min_length=1, max_length=32)
    selection: Selection

    @model_validator(mode="after")
    def _consistent(self) -> Query:
        _unique(self.fields, "query.fields")
        sel = self.selection
        if isinstance(sel, RandomNgramSelection) and sel.field not in self.fields:
            raise ValueError("the n-gram selection's field must be one of query.fields")
        return self


class CohortField(_Frozen):
    """A non-sensitive field (000 §4.1: e.g. the locale) and the values a cohort may take."""

    field: FieldName
    values: tuple[Token, ...] = Field(min_length=1, max_length=1000)

    @field_validator("values")
    @classmethod
    def _distinct(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        _unique(values, "cohort values")
        return values


# --- encoding (000 §4.1, appendix B "data content type") ----------------------------------------


class BucketFeature(_Frozen):
    """Numbers bucketed by ascending `boundaries`: [b0, b1), [b1, b2), ...; bucket 0 is OOV
    (000 appendix B: ages {OOV, [20, 30), ..., [70, 80)} from boundaries 20, 30, ..., 80)."""

    kind: Literal["buckets"] = "buckets"
    field: FieldName
    boundaries: tuple[float, ...] = Field(min_length=2, max_length=100_000)

    @field_validator("boundaries")
    @classmethod
    def _ascending(cls, values: tuple[float, ...]) -> tuple[float, ...]:
        if not all(math.isfinite(v) for v in values):
            raise ValueError("bucket boundaries must be finite")
        if any(b <= a for a, b in itertools.pairwise(values)):
            raise ValueError("bucket boundaries must be strictly increasing")
        return values

    @property
    def size(self) -> int:
        return len(self.boundaries)  # OOV plus len - 1 intervals

    def bucket(self, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return 0
        for i in range(len(self.boundaries) - 1):
            if self.boundaries[i] <= value < self.boundaries[i + 1]:
                return i + 1
        return 0


class CategoryFeature(_Frozen):
    """A categorical field with listed values; anything else is bucket 0 (OOV)."""

    kind: Literal["categories"] = "categories"
    field: FieldName
    values: tuple[Token, ...] = Field(min_length=1, max_length=100_000)

    @field_validator("values")
    @classmethod
    def _distinct(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        _unique(values, "category values")
        return values

    @property
    def size(self) -> int:
        return 1 + len(self.values)

    def bucket(self, value: object) -> int:
        return 1 + self.values.index(value) if value in self.values else 0


class NgramFeature(_Frozen):
    """n-grams over a prefix tree and known tokens (000 §4.1 and appendix B).

    `prefixes` are the leaves of the prefix tree, each n-1 tokens. Buckets: 0 is OOV (the prefix
    is not a leaf); then per leaf, in order: the end token (the n-gram stops at the leaf), OOV
    (the next token is not known), and one bucket per known token. Size 1 + L (2 + K), e.g.
    000's 1 + 3 (1 + 1 + 9). n = 1 is the first round of 000 §1's interactive search (popular
    words): one empty prefix, the tree's root.
    """

    kind: Literal["ngram"] = "ngram"
    field: FieldName
    n: int = Field(ge=1, le=8)
    prefixes: tuple[tuple[Token, ...], ...] = Field(min_length=1, max_length=100_000)
    known_tokens: tuple[Token, ...] = Field(max_length=100_000)

    @model_validator(mode="after")
    def _shapes(self) -> NgramFeature:
        if any(len(p) != self.n - 1 for p in self.prefixes):
            raise ValueError(f"every prefix must have n - 1 = {self.n - 1} tokens")
        _unique(self.prefixes, "prefixes")
        _unique(self.known_tokens, "known_tokens")
        return self

    @property
    def size(self) -> int:
        return 1 + len(self.prefixes) * (2 + len(self.known_tokens))

    def bucket(self, value: object) -> int:
        """`value`: the n-gram as a sequence of n tokens, or n-1 tokens when it ends there."""
        if isinstance(value, str) or not isinstance(value, Sequence):
            return 0
        tokens = tuple(value)
        prefix = tokens[: self.n - 1]
        if prefix not in self.prefixes:
            return 0
        base = 1 + self.prefixes.index(prefix) * (2 + len(self.known_tokens))
        if len(tokens) == self.n - 1:
            return base  # end token
        last = tokens[self.n - 1] if len(tokens) == self.n else None
        if last in self.known_tokens:
            return base + 2 + self.known_tokens.index(last)
        return base + 1


class IntegerFeature(_Frozen):
    """A non-negative integer below 2^bits, as bit pushing takes it (003)."""

    kind: Literal["integer"] = "integer"
    field: FieldName
    bits: int = Field(ge=1, le=32)

    @property
    def size(self) -> int:
        return 1 << self.bits

    def bucket(self, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.size:
            raise ValueError(f"{self.field} must be an integer in [0, 2^{self.bits})")
        return value


class StringFeature(_Frozen):
    """A text field the `sfp` randomizer sketches whole (002 §4.3), over the randomizer's
    alphabet and length. It has no one-hot buckets: it adds nothing to the encoding's dimension
    (size 1) and `bucket` refuses."""

    kind: Literal["string"] = "string"
    field: FieldName

    @property
    def size(self) -> int:
        return 1

    def bucket(self, value: object) -> int:
        raise ValueError(f"{self.field} is a string feature: the sfp randomizer sketches it")


Feature = Annotated[
    BucketFeature | CategoryFeature | NgramFeature | IntegerFeature | StringFeature,
    Field(discriminator="kind"),
]


class Encoding(_Frozen):
    """The feature tuple; a record's one-hot index is mixed-radix, first feature most
    significant (000 appendix B: "every combination of buckets above builds a one hot vector")."""

    features: tuple[Feature, ...] = Field(min_length=1, max_length=8)

    @model_validator(mode="after")
    def _bounded(self) -> Encoding:
        _unique([f.field for f in self.features], "encoding feature fields")
        if self.dimension > MAX_DIMENSION:
            raise ValueError(f"the one-hot dimension {self.dimension} exceeds {MAX_DIMENSION}")
        return self

    @property
    def dimension(self) -> int:
        return math.prod(f.size for f in self.features)

    def index(self, record: Mapping[str, object]) -> int:
        """The one-hot index of a record (field name -> value; a missing field is OOV)."""
        out = 0
        for feature in self.features:
            out = out * feature.size + feature.bucket(record.get(feature.field))
        return out


# --- local randomizer (shared.dp.randomizers) ----------------------------------------------------

#: Local epsilons above this make no sense for LDP reports (and overflow some analyses).
Epsilon0 = Annotated[float, Field(gt=0, le=20)]


class OneHotRandomizer(_Frozen):
    """`shared.dp.randomizers.onehot.OneHotRandomizer`: `eps0` is per bit; symmetric RAPPOR
    (004 §6.1.1) is 2 eps0-LDP under replacement, the asymmetric variant eps0."""

    name: Literal["one_hot"] = "one_hot"
    eps0: Epsilon0
    symmetric: bool = True

    @property
    def local_epsilon(self) -> float:
        return 2 * self.eps0 if self.symmetric else self.eps0


class CmsRandomizer(_Frozen):
    """`shared.dp.randomizers.cms.CountMeanSketch` (002 §2.1), eps0-LDP."""

    name: Literal["cms"] = "cms"
    eps0: Epsilon0
    k: int = Field(ge=1, le=65536)
    m: int = Field(ge=2, le=65536)
    seed: int = Field(default=0, ge=0, lt=2**53)

    @property
    def local_epsilon(self) -> float:
        return self.eps0


class HcmsRandomizer(_Frozen):
    """`shared.dp.randomizers.cms.HadamardCountMeanSketch` (002 §2.2), eps0-LDP; m a power of 2."""

    name: Literal["hcms"] = "hcms"
    eps0: Epsilon0
    k: int = Field(ge=1, le=65536)
    m: int = Field(ge=2, le=65536)
    seed: int = Field(default=0, ge=0, lt=2**53)

    @field_validator("m")
    @classmethod
    def _power_of_two(cls, m: int) -> int:
        if m & (m - 1):
            raise ValueError("HCMS needs m a power of 2")
        return m

    @property
    def local_epsilon(self) -> float:
        return self.eps0


class BitPushingRandomizer(_Frozen):
    """`shared.dp.randomizers.bitpushing.BitPushing` with randomized response at eps0 (003);
    the value's bit count comes from the encoding's integer feature."""

    name: Literal["bit_pushing"] = "bit_pushing"
    eps0: Epsilon0

    @property
    def local_epsilon(self) -> float:
        return self.eps0


class SketchParams(_Frozen):
    """One Count Mean Sketch of an SFP report: its epsilon, k hash rows of m columns, and the
    public seed of its hash family (`shared.dp.randomizers.cms`)."""

    eps0: Epsilon0
    k: int = Field(ge=1, le=65536)
    m: int = Field(ge=2, le=65536)
    seed: int = Field(default=0, ge=0, lt=2**53)

    def sketch(self) -> CountMeanSketch:
        return CountMeanSketch(self.eps0, self.k, self.m, self.seed)


#: Largest number of (puzzle value, fragment) pairs, 256 |alphabet|^fragment_length, the
#: collector enumerates per position (002: 256 * 26^2 or so; 2^22 keeps it to seconds).
MAX_FRAGMENT_PAIRS = 1 << 22


class SfpRandomizer(_Frozen):
    """`shared.dp.randomizers.sfp.SequenceFragmentPuzzle` (002 §4.3, Algorithms 8-10): new
    strings (words outside any dictionary) over `alphabet`, padded or truncated to `length`
    with `pad`. A report is a CMS report of the whole string (`word`: 002's (eps, k, m)) and
    one of the fragment h(s) || s[l : l + fragment_length] at a uniform position l
    (`fragment`: 002's (eps', k', m')); it is (eps + eps')-LDP by basic composition (002
    Theorem 4.5). The collector keeps the `top` (002's T) fragments per position."""

    name: Literal["sfp"] = "sfp"
    length: int = Field(ge=1, le=64)
    fragment_length: int = Field(ge=1, le=8)
    alphabet: str = Field(min_length=2, max_length=256)
    pad: str = Field(default=" ", min_length=1, max_length=1)
    word: SketchParams
    fragment: SketchParams
    top: int = Field(ge=1, le=100_000)

    @model_validator(mode="after")
    def _consistent(self) -> SfpRandomizer:
        if self.length % self.fragment_length:
            raise ValueError("sfp length must be a multiple of fragment_length")
        if len(set(self.alphabet)) != len(self.alphabet):
            raise ValueError("sfp alphabet characters must not repeat")
        if not self.alphabet.isprintable():
            raise ValueError("sfp alphabet characters must be printable")
        if self.pad not in self.alphabet:
            raise ValueError("the sfp pad must be a character of the alphabet")
        pairs = PUZZLE_RANGE * len(self.alphabet) ** self.fragment_length
        if pairs > MAX_FRAGMENT_PAIRS:
            raise ValueError(
                f"256 x {len(self.alphabet)}^{self.fragment_length} = {pairs} fragments per "
                f"position exceed {MAX_FRAGMENT_PAIRS}"
            )
        if self.top > pairs:
            raise ValueError(f"top {self.top} exceeds the {pairs} possible fragments")
        length = sfp_length(self.puzzle())
        if length > MAX_DIMENSION:
            raise ValueError(f"the sfp measurement length {length} exceeds {MAX_DIMENSION}")
        return self

    @property
    def local_epsilon(self) -> float:
        return self.word.eps0 + self.fragment.eps0

    def puzzle(self) -> SequenceFragmentPuzzle:
        return SequenceFragmentPuzzle(
            self.alphabet,
            self.word.sketch(),
            self.fragment.sketch(),
            self.length,
            self.fragment_length,
            self.pad,
        )


Randomizer = Annotated[
    OneHotRandomizer | CmsRandomizer | HcmsRandomizer | BitPushingRandomizer | SfpRandomizer,
    Field(discriminator="name"),
]


class PrivacyClaim(_Frozen):
    """The aggregate (epsilon, delta) the recipe claims for B reports sampled at rate q, and the
    analysis of `shared.dp.amplification` that backs it."""

    epsilon: float = Field(gt=0, le=10)
    delta: float = Field(gt=0, le=1e-3)
    analysis: Analysis = "stronger_clones"


# --- the DAP task and the token issuer -----------------------------------------------------------

QueryTypeName = Literal["time_interval", "fixed_size"]


def _check_task_id(value: str) -> str:
    try:
        TaskId.from_b64url(value)
    except DecodeError as exc:
        raise ValueError(str(exc)) from exc
    return value


def _check_config_list(value: str, what: str) -> str:
    try:
        HpkeConfigList.decode(b64url_decode(value, what))
    except DecodeError as exc:
        raise ValueError(f"{what}: {exc}") from exc
    return value


#: Largest population estimate a recipe may state.
MAX_POPULATION = 10**12
#: Largest max_multiple (as `RateValidation` allows).
MaxMultiple = Annotated[float, Field(ge=1, le=1_000_000)]


class RateEstimate(_Frozen):
    """The analyst's estimate behind rate validation (001 §4.8, `shared.recipe.rate`): about
    `expected_population` devices answer within `collection_window` seconds (default: the
    task's `expires_in`); the aggregators refuse batches with a time bucket above
    `max_multiple` times the expected rate."""

    expected_population: int = Field(ge=1, le=MAX_POPULATION)
    collection_window: Window | None = None
    max_multiple: MaxMultiple = 2.0


class RecipeRateValidation(_Frozen):
    """The published rate validation: the estimate and the `expected_reports_per_bucket` the
    aggregators enforce. `Recipe` checks that the latter follows from the former."""

    expected_population: int = Field(ge=1, le=MAX_POPULATION)
    collection_window: int = Field(ge=1)
    max_multiple: MaxMultiple
    expected_reports_per_bucket: int = Field(ge=1)

    def setting(self) -> RateValidation:
        """What both aggregators' task definitions hold."""
        return RateValidation(
            expected_reports_per_bucket=self.expected_reports_per_bucket,
            max_multiple=self.max_multiple,
        )


class RecipeTask(_Frozen):
    """The DAP task the reports go to (DAP-09 §4.2, DAP-19 §4.2), with the aggregators' HPKE
    configs (`HpkeConfigList`, unpadded base64url) so that devices need not fetch them
    unauthenticated.

    A DAP-19 task (`dap` "dap-19") also publishes its encoded TaskConfiguration (unpadded
    base64url): devices bind those exact bytes into every input share's AAD (DAP-19 §4.4.2),
    so they come signed and logged with the recipe, never from an aggregator. Both are left
    out of a DAP-09 recipe's canonical bytes, so older recipes verify.
    """

    task_id: str
    leader: HttpUrl
    helper: HttpUrl
    query_type: QueryTypeName = "time_interval"
    vdaf: VdafSpec
    dap: DapVersion | None = None
    task_configuration: str | None = None
    time_precision: int = Field(ge=1)
    task_expiration: int | None = Field(default=None, ge=0)
    leader_hpke_configs: str
    helper_hpke_configs: str
    #: None: no rate validation (left out of the canonical bytes, so older recipes verify).
    rate_validation: RecipeRateValidation | None = None
    #: True: a taskprov task (digest §11), which devices announce in the DAP-Taskprov header of
    #: their uploads and the leader opts into; its id is the one taskprov derives from
    #: `task_configuration`. None (left out of the canonical bytes): provisioned out of band.
    taskprov: bool | None = None

    @field_validator("task_id")
    @classmethod
    def _task_id(cls, value: str) -> str:
        return _check_task_id(value)

    @field_validator("leader_hpke_configs", "helper_hpke_configs")
    @classmethod
    def _configs(cls, value: str) -> str:
        return _check_config_list(value, "HPKE config list")

    @model_validator(mode="after")
    def _dap_19_configuration(self) -> RecipeTask:
        if self.vdaf.draft != VDAF_OF_DAP[self.dap_version]:
            raise ValueError(f"a {self.dap_version} task runs {VDAF_OF_DAP[self.dap_version]}")
        if (self.dap_version == "dap-19") != (self.task_configuration is not None):
            raise ValueError("task_configuration comes with a dap-19 task, and only with one")
        if self.task_configuration is not None:
            config = TaskConfiguration.decode(
                b64url_decode(self.task_configuration, "task_configuration")
            )
            if vdaf_spec(config.vdaf_type, config.vdaf_configuration) != self.vdaf:
                raise ValueError("task_configuration names another VDAF than task.vdaf")
        if self.taskprov:
            if self.task_configuration is None:
                raise ValueError("a taskprov task is a dap-19 task")
            raw = b64url_decode(self.task_configuration, "task_configuration")
            if task_id_of(raw).to_b64url() != self.task_id:
                raise ValueError("a taskprov task's id is the one taskprov derives")
        return self

    @property
    def dap_version(self) -> DapVersion:
        return self.dap or "dap-09"

    @property
    def vdaf_draft(self) -> VdafVersion:
        return VDAF_OF_DAP[self.dap_version]

    def hpke_configs(self, role: Literal["leader", "helper"]) -> HpkeConfigList:
        raw = self.leader_hpke_configs if role == "leader" else self.helper_hpke_configs
        return HpkeConfigList.decode(b64url_decode(raw, f"{role}_hpke_configs"))


class DraftTask(_Frozen):
    """The analyst's task choices; the server creates the task (or reuses `task_id`)."""

    task_id: str | None = None
    query_type: QueryTypeName = "time_interval"
    #: The DAP draft of the task the server creates (None: dap-09); it fixes the VDAF draft.
    dap: DapVersion | None = None
    #: If given, must equal the VDAF the randomizer maps to (`shared.dp.vdaf_mapping`).
    vdaf: VdafSpec | None = None
    time_precision: int = Field(default=3600, ge=1)
    expires_in: int | None = Field(default=None, ge=1)
    rate_validation: RateEstimate | None = None

    @field_validator("task_id")
    @classmethod
    def _task_id(cls, value: str | None) -> str | None:
        return None if value is None else _check_task_id(value)

    @model_validator(mode="after")
    def _rate_window(self) -> DraftTask:
        rate = self.rate_validation
        if rate is not None:
            window = rate.collection_window or self.expires_in
            if window is None:
                raise ValueError("rate_validation needs a collection_window (or expires_in)")
            if window < self.time_precision:
                raise ValueError("the rate validation's collection window is below time_precision")
        return self

    def published_rate(self, sampling_rate: float) -> RecipeRateValidation | None:
        """The rate validation the recipe publishes for a sampling rate of `sampling_rate`."""
        rate = self.rate_validation
        if rate is None:
            return None
        window = rate.collection_window or self.expires_in
        assert window is not None  # _rate_window
        return RecipeRateValidation(
            expected_population=rate.expected_population,
            collection_window=window,
            max_multiple=rate.max_multiple,
            expected_reports_per_bucket=expected_reports_per_bucket(
                sampling_rate, rate.expected_population, self.time_precision, window
            ),
        )


class TokenIssuerRef(_Frozen):
    """The Privacy Pass issuer whose tokens the aggregators accept (RFC 9578 token type 2).

    `key_ids` are base64url token_key_ids (SHA-256 of the public key, RFC 9578 §6.5): the only
    keys devices request tokens under and aggregators accept (`TokenPolicy.key_ids`), the same
    for every device since the recipe is signed and logged, so an issuer cannot tag devices
    with keys of their own. The recipe server fills them from the operator's pinned keys of
    the issuer; a recipe pinning none is refused by devices that use tokens.
    """

    url: HttpUrl
    token_type: int = Field(default=2, ge=0, le=0xFFFF)
    key_ids: tuple[str, ...] = ()
    #: The token challenge's issuer_name (RFC 9577 §2.1.1) and the token window, as the
    #: aggregators' `TokenPolicy` has them. None keeps what devices assumed before recipes
    #: carried them (the URL's authority, a day; `token_policy_for_issuer`), and is left out
    #: of the canonical bytes, so recipes signed before these fields existed still verify.
    issuer_name: str | None = Field(default=None, min_length=1, max_length=255)
    window_seconds: Window | None = None

    def token_policy(self) -> TokenPolicy:
        """The policy a device follows and the aggregators enforce for this issuer."""
        if self.window_seconds is None:
            policy = token_policy_for_issuer(self.url)
        else:
            policy = token_policy_for_issuer(self.url, self.window_seconds)
        update: dict[str, object] = {"key_ids": self.key_ids}
        if self.issuer_name is not None:
            update["issuer_name"] = self.issuer_name
        return policy.model_copy(update=update)

    def explicit(self) -> TokenIssuerRef:
        """The same reference with the defaults spelled out (what the server publishes)."""
        policy = self.token_policy()
        return self.model_copy(
            update={"issuer_name": policy.issuer_name, "window_seconds": policy.window_seconds}
        )

    @field_validator("key_ids")
    @classmethod
    def _key_ids(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for v in values:
            if len(b64url_decode(v, "token key id")) != 32:
                raise ValueError("a token key id is 32 bytes")
        _unique(values, "key_ids")
        return values


# --- the recipe ----------------------------------------------------------------------------------


class _RecipeBody(_Frozen):
    format: Literal["sagg-recipe/1"] = RECIPE_FORMAT
    recipe_id: Identifier
    version: int = Field(ge=1, lt=2**31)
    analysis_id: Identifier
    description: str = Field(default="", max_length=4000)
    query: Query
    cohorts: tuple[CohortField, ...] = Field(default=(), max_length=8)
    encoding: Encoding
    randomizer: Randomizer
    sampling_rate: float = Field(gt=0, le=1)
    #: q' of 001 §4.6: the probability that a device not sampled sends a dummy report (a
    #: measurement that adds nothing), so the batch size hides how many devices contributed.
    #: The accounting and the collector's estimates count with it (`shared.recipe.accounting`).
    #: None (left out of the canonical bytes): no dummies.
    dummy_rate: float | None = Field(default=None, gt=0, le=1)
    min_batch_size: int = Field(ge=1, le=MAX_B)
    privacy: PrivacyClaim
    #: 004 §5 aggregator randomization, provisioned into both aggregators' task. None (left out
    #: of the canonical bytes, so older recipes still verify): client randomization only.
    aggregator_noise: AggregatorNoise | None = None

    @model_validator(mode="after")
    def _consistent(self) -> _RecipeBody:
        fields = set(self.query.fields)
        for feature in self.encoding.features:
            if feature.field not in fields:
                raise ValueError(f"encoding field {feature.field!r} is not in query.fields")
        cohort_fields = [c.field for c in self.cohorts]
        _unique(cohort_fields, "cohort fields")
        if fields & set(cohort_fields):
            raise ValueError("a cohort field must not also be a queried field")
        sel = self.query.selection
        if isinstance(sel, RandomNgramSelection):
            ngram = next((f for f in self.encoding.features if f.field == sel.field), None)
            if not isinstance(ngram, NgramFeature) or ngram.n != sel.n:
                raise ValueError("the n-gram selection needs an n-gram feature of the same n")
        if isinstance(self.randomizer, BitPushingRandomizer) and not (
            len(self.encoding.features) == 1
            and isinstance(self.encoding.features[0], IntegerFeature)
        ):
            raise ValueError("bit_pushing needs exactly one integer feature")
        if any(isinstance(f, IntegerFeature) for f in self.encoding.features) and not isinstance(
            self.randomizer, BitPushingRandomizer
        ):
            raise ValueError("integer features are only for bit_pushing")
        strings = [f for f in self.encoding.features if isinstance(f, StringFeature)]
        if isinstance(self.randomizer, SfpRandomizer) and not (
            len(self.encoding.features) == 1 and strings
        ):
            raise ValueError("sfp needs exactly one string feature")
        if strings and not isinstance(self.randomizer, SfpRandomizer):
            raise ValueError("string features are only for sfp")
        if self.privacy.analysis.startswith("sym_rappor") and not (
            isinstance(self.randomizer, OneHotRandomizer) and self.randomizer.symmetric
        ):
            raise ValueError(f"analysis {self.privacy.analysis} is for symmetric one_hot only")
        if self.dummy_rate is not None and self.sampling_rate >= 1:
            raise ValueError("dummy_rate needs sampling_rate < 1: every device reports")
        return self


class Recipe(_RecipeBody):
    """A published recipe: everything a device needs, signed and logged by the recipe server."""

    task: RecipeTask
    token_issuer: TokenIssuerRef

    @model_validator(mode="after")
    def _dummies_possible(self) -> Recipe:
        if self.dummy_rate is not None and self.task.vdaf.zero_measurement() is None:
            raise ValueError(
                f"dummy_rate: {self.task.vdaf.describe()} has no measurement that adds nothing"
            )
        return self

    @model_validator(mode="after")
    def _rate_follows(self) -> Recipe:
        """001 §4.8: the published expected rate is the one q, N, tp and W give (a device
        refuses a recipe whose aggregators would tolerate more)."""
        rate = self.task.rate_validation
        if rate is None:
            return self
        try:
            want = expected_reports_per_bucket(
                self.sampling_rate,
                rate.expected_population,
                self.task.time_precision,
                rate.collection_window,
            )
        except ValueError as exc:
            raise ValueError(f"task.rate_validation: {exc}") from None
        if rate.expected_reports_per_bucket != want:
            raise ValueError(
                f"task.rate_validation: expected_reports_per_bucket"
                f" {rate.expected_reports_per_bucket} does not follow from q N tp / W = {want}"
            )
        return self

    @property
    def key(self) -> tuple[str, int]:
        return self.recipe_id, self.version


class RecipeDraft(_RecipeBody):
    """What an analyst submits to the recipe server."""

    task: DraftTask = DraftTask()
    token_issuer: TokenIssuerRef | None = None

    def complete(self, task: RecipeTask, token_issuer: TokenIssuerRef) -> Recipe:
        body = self.model_dump(exclude={"task", "token_issuer"})
        return Recipe(**body, task=task, token_issuer=token_issuer)
