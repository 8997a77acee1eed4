"""inference-perf ``shared_prefix`` content: system-prompt groups, users, multi-turn chat.

Semantics follow inference-perf's ``SharedPrefixDataGenerator`` (read, not copied):

* ``G = num_unique_system_prompts`` groups, each with one system prompt; ``P =
  num_users_per_system_prompt`` users per group; ``N = G * P`` prompts. Question and
  answer lengths are drawn once per prompt (flat index ``f = g * P + p``).
* Single turn: prompt ``f`` is system prompt ``g`` followed by question ``f``; the N
  prompts (with their answer lengths) are shuffled once; request ``i`` of a stage uses
  shuffled prompt ``i mod N``.
* Multi-turn: ``N`` user sessions, shuffled once; request ``i`` goes to session
  ``perm[i mod N]`` (whose context starts as its group's system prompt) and asks
  question ``i mod N`` with answer length ``i mod N``. Its prompt is the session's
  context followed by the question; after a successful answer the context becomes
  that prompt followed by the answer (a failed turn leaves it unchanged). Turns of
  one session are sent one at a time (the source serialises them).

Content keys (``entity`` is the source's entity name): system prompt ``g`` is
``{entity}/sys/{g}`` (shared by all its users, also the request's ``prefix_group``);
question ``f`` is ``{entity}/question/{f}``; an answer is
:func:`~blis_core.contracts.request.output_content_key` of its request, so a later
turn's prompt contains the earlier turns exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from blis_core.contracts.request import InferenceRequest, PromptSegment, output_content_key
from blis_core.contracts.workload import FixedLength, LengthSpec, SharedPrefixSpec
from blis_core.workload.arrivals import RngFactory, ScheduledArrival
from blis_core.workload.lengths import sample_lengths

__all__ = ["SharedPrefixContent"]


def _as_spec(value: int | LengthSpec) -> LengthSpec:
    return FixedLength(value=value) if isinstance(value, int) else value


def _inflate(tokens: int, factor: float) -> int:
    return tokens if factor == 1.0 else math.floor(tokens * factor + 0.5)


@dataclass(slots=True)
class _Turn:
    session: int
    prompt: tuple[PromptSegment, ...]


class SharedPrefixContent:
    """Builds the requests of one shared-prefix workload.

    Draws (purpose, entity): question lengths ``("input_len", f"{entity}/question")``,
    answer lengths ``("output_len", f"{entity}/answer")``, the shuffle
    ``("prefix", entity)``. Lengths are drawn in flat-index order, one uniform each.
    """

    def __init__(
        self,
        spec: SharedPrefixSpec,
        rng_for: RngFactory,
        entity: str,
        *,
        ignore_eos: bool = True,
    ) -> None:
        self._spec = spec
        self._entity = entity
        self._ignore_eos = ignore_eos
        groups, users = spec.num_unique_system_prompts, spec.num_users_per_system_prompt
        self._users = users
        self._n = groups * users
        q = sample_lengths(
            _as_spec(spec.question_len), rng_for("input_len", f"{entity}/question"), self._n
        )
        self._question_len = [_inflate(int(v), spec.token_inflation) for v in q]
        a = sample_lengths(
            _as_spec(spec.output_len), rng_for("output_len", f"{entity}/answer"), self._n
        )
        self._answer_len = [int(v) for v in a]
        self._system_len = _inflate(spec.system_prompt_len, spec.token_inflation)
        self._perm = [int(v) for v in rng_for("prefix", entity).permutation(self._n)]
        self._multi_turn = spec.enable_multi_turn_chat
        self._full_history = self._multi_turn and spec.history == "full"
        self._context: dict[int, tuple[PromptSegment, ...]] = {}
        self._turns: dict[int, int] = {}
        self._open: dict[str, _Turn] = {}

    @property
    def num_prompts(self) -> int:
        """``N``: distinct prompts (single turn) or user sessions (multi-turn)."""
        return self._n

    @property
    def prompts_outputs(self) -> bool:
        """Whether a prompt may hold an earlier request's answer (multi-turn sessions)."""
        return self._multi_turn

    @property
    def serialises_sessions(self) -> bool:
        """True when a session's turns must be sent one at a time (multi-turn, full history)."""
        return self._full_history

    def _system_segment(self, group: int) -> tuple[PromptSegment, ...]:
        if self._system_len == 0:
            return ()
        return (PromptSegment(self.system_key(group), self._system_len),)

    def system_key(self, group: int) -> str:
        """Content key of group ``group``'s system prompt."""
        return f"{self._entity}/sys/{group}"

    def question_key(self, flat_index: int) -> str:
        """Content key of question ``flat_index``."""
        return f"{self._entity}/question/{flat_index}"

    def session_of(self, item: ScheduledArrival) -> str | None:
        """Session id of a scheduled request (``None`` unless multi-turn)."""
        if not self._multi_turn:
            return None
        return f"{self._entity}/user{self._perm[item.index_in_stage % self._n]}"

    def build(self, item: ScheduledArrival, request_id: str, arrival_us: int) -> InferenceRequest:
        """The request for ``item``, sent at ``arrival_us``; its prompt reflects every
        turn of its session completed so far."""
        slot = item.index_in_stage % self._n
        if self._multi_turn:
            session = self._perm[slot]
            question, answer = slot, slot
        else:
            session = self._perm[slot]
            question, answer = session, session
        group = session // self._users
        q_seg = PromptSegment(self.question_key(question), self._question_len[question])
        if self._full_history:
            context = self._context.get(session) or self._system_segment(group)
        else:
            context = self._system_segment(group)
        prompt = (*context, q_seg)
        turn = self._turns.get(session, 0)
        if self._multi_turn:
            self._turns[session] = turn + 1
        if self._full_history:
            self._open[request_id] = _Turn(session, prompt)
        return InferenceRequest(
            request_id=request_id,
            arrival_us=arrival_us,
            prompt=prompt,
            max_output_tokens=self._answer_len[answer],
            ignore_eos=self._ignore_eos,
            session_id=f"{self._entity}/user{session}" if self._multi_turn else None,
            turn=turn if self._multi_turn else 0,
            prefix_group=self.system_key(group),
        )

    def on_done(self, request_id: str, output_tokens: int, failed: bool) -> None:
        """Fold a completed turn into its session's context (unchanged if ``failed``)."""
        turn = self._open.pop(request_id, None)
        if turn is None or failed:
            return
        answer = PromptSegment(output_content_key(request_id), max(0, output_tokens))
        self._context[turn.session] = (*turn.prompt, answer)
