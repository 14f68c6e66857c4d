"""Direct requests down a failover chain, as the runtime's admission, zone attempts and
failover steps do it, with the decisions made by the same functions:
:func:`corral.shared.planner.plan` (the chain),
:func:`corral.shared.failover_plan.plan_step` (the next candidate within a zone's region, its
cloud, or anywhere; else a wait or a failure), :meth:`Block.for_error` and
:func:`corral.shared.blocking.is_blocked` (the capacity-error memory).

:class:`Launcher` plays Corral (one memory of blocked scopes shared by every request, a lost
machine's request relaunched as :func:`corral.shared.recovery.relaunch_after_loss` decides,
an exhausted chain waits for capacity and is walked again as
:func:`corral.shared.waiting.decide_wait` says) and, with
``shared_memory=False`` and ``retry_until_up``, a SkyPilot-like launcher (blocks kept per
request, the whole chain tried again after a pause until it is up, recoveries without limit).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import repeat

from ..backoff import backoff_s
from ..blocking import Block, BlockIndex, Placed, PlaceKey, is_blocked, place_key
from ..config.task import Task
from ..errors import LaunchTimeoutError, ProviderError, Scope, ThrottledError
from ..failover import Within
from ..failover_plan import Attempt, Fail, Snapshot, WaitPolicy, WaitUntil, plan_step
from ..placement import Placement
from ..planner import Candidate, Plan, plan
from ..recovery import Loss, relaunch_after_loss
from ..waiting import WaitTerms, backoff_of, lifted_by_release, renewed_until, woken_by_release
from .cloud import SimInstance
from .engine import Sim

OnUp = Callable[[str, list[SimInstance]], None]
OnFailed = Callable[[str, str], None]


BlockFields = tuple[str, str | None, str | None, str | None, str | None, str | None, int | None]


def fields_of(block: Block) -> BlockFields:
    b = block
    return (b.cloud, b.region, b.zone, b.instance_type, b.market, b.quota_family, b.above)


@dataclass
class BlockMemory:
    """The capacity-error memory (the runtime keeps it in Redis): blocks with an expiry."""

    until: dict[Block, float] = field(default_factory=dict)
    # The same expiries by each block's fields as a tuple: a waiting request looks its blocks
    # up at every due retry, and a tuple hashes in C (a Block's hash is Python code).
    by_fields: dict[BlockFields, float] = field(default_factory=dict)
    # Blocks a lost machine left (the runtime's outcome ``lost``): a release does not lift them.
    kept: set[Block] = field(default_factory=set)
    # Counts every change of what is in force (a block added, renewed, lifted or expired): a
    # pool pass that read the blocks at one count may keep what it worked out from them.
    changes: int = 0
    # The same count per cloud: what a pool works out from its own cloud's blocks alone
    # (whether its launches would be refused) holds while that cloud's count stays.
    changes_of: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    # The count of changes and the blocks in force at it, arranged for look-ups.
    _index: tuple[int, BlockIndex] | None = field(default=None, repr=False, compare=False)

    def add(self, block: Block, now: float, ttl_s: float, *, keep: bool = False) -> None:
        until = max(self.until.get(block, 0.0), now + ttl_s)
        self.until[block] = self.by_fields[fields_of(block)] = until
        self.changes += 1
        self.changes_of[block.cloud] += 1
        if keep:
            self.kept.add(block)
        else:
            self.kept.discard(block)  # the store keeps the latest outcome, as here

    def lift(self, blocks: Sequence[Block], now: float) -> int:
        """End the ``blocks`` still in force now, those a lost machine left excepted (the
        runtime's ``BlockStore.lift``); returns how many ended."""
        gone = 0
        for block in blocks:
            until = self.until.get(block)
            if until is not None and until > now and block not in self.kept:
                del self.until[block]
                del self.by_fields[fields_of(block)]
                self.changes_of[block.cloud] += 1
                gone += 1
        self.changes += gone
        return gone

    def indexed(self, now: float) -> tuple[list[tuple[Block, float]], BlockIndex]:
        """``active_until(now)`` and the same blocks as a :class:`BlockIndex`, kept (and
        given again) until what is in force changes: a failover step walks its chain
        against it without arranging the blocks anew."""
        active = self.active_until(now)
        kept = self._index
        if kept is None or kept[0] != self.changes:
            kept = self._index = (self.changes, BlockIndex(b for b, _ in active))
        return active, kept[1]

    def active(self, now: float) -> list[Block]:
        return [b for b, _ in self.active_until(now)]

    def active_until(self, now: float) -> list[tuple[Block, float]]:
        """The blocks still in force at ``now``, each with its expiry (the expired forgotten)."""
        gone = [b for b, t in self.until.items() if t <= now]
        for block in gone:
            del self.until[block]
            del self.by_fields[fields_of(block)]
            self.kept.discard(block)
            self.changes_of[block.cloud] += 1
        self.changes += len(gone)
        return list(self.until.items())


BlockWaitKey = tuple[int, tuple[BlockFields, ...]]  # a memory's id, the blocks waited on


@dataclass
class _BlockWait:
    """Requests waiting on one set of blocks, with their wait (relaunches, retries), and
    when they are looked at next."""

    at: float
    flows: list[tuple[Flow, tuple[int, int]]] = field(default_factory=list)


@dataclass
class Flow:
    """One request on its way down its chain (or up and running)."""

    rid: str
    task: Task
    chain: list[Candidate]
    on_up: OnUp
    on_failed: OnFailed
    owner: str  # who its machines are billed to
    since: float = 0.0  # when it started looking for capacity (max_wait counts from here)
    retries: int = 0  # walks of its chain made again after waiting (since ``since``)
    relaunches: int = 0
    lost_in_a_row: int = 0  # what relaunch_limit bounds (the runtime's request keeps it too)
    lost_zones: list[tuple[str, str]] = field(default_factory=list)  # (cloud, zone) lost in
    tries: int = 0  # calls made, for unique launch keys
    instances: list[SimInstance] = field(default_factory=list)
    memory: BlockMemory | None = None  # its own blocks (SkyPilot-like); None: the shared one
    seq: int = 0  # its submission's order (the runtime's oldest-first list of requests)
    up: bool = False
    ended: bool = False
    # The places of ``chain`` (its place keys), and the chain they were read from.
    _keys: frozenset[PlaceKey] = frozenset()
    _keys_of: list[Candidate] | None = None

    def place_keys(self) -> frozenset[PlaceKey]:
        """The places its chain holds (worked out once per chain: a relaunch plans a new one)."""
        if self._keys_of is not self.chain:
            self._keys = frozenset(map(place_key, self.chain))
            self._keys_of = self.chain
        return self._keys


class Launcher:
    """Direct requests over the simulated cloud (see the module docstring)."""

    def __init__(
        self,
        sim: Sim,
        *,
        shared_memory: bool = True,
        retry_until_up: bool = False,
        relaunch_limit: int | None = None,
        wide_blocks: bool = False,
    ) -> None:
        self.sim = sim
        # The rule before issue #46, kept to measure what the cloud's own scopes buy: a quota
        # error blocks its whole region, a shortfall its zone's type for every ask.
        self.wide_blocks = wide_blocks
        self.memory = BlockMemory()
        self.shared_memory = shared_memory
        self.retry_until_up = retry_until_up
        self.relaunch_limit = relaunch_limit
        self.flows: dict[str, Flow] = {}
        self.by_instance: dict[str, Flow] = {}
        self.waiters: dict[str, Flow] = {}  # WAITING for capacity (Corral's rule), by id
        # Those whose every candidate is blocked, by the memory and the blocks they wait on.
        self.block_waits: dict[BlockWaitKey, _BlockWait] = {}
        self.submitted = 0
        self.clouds = tuple(sim.scenario.clouds)
        self.backoff = backoff_of(sim.timers)

    def waiting(self) -> int:
        return sum(1 for f in self.flows.values() if not f.up and not f.ended)

    # ------------------------------------------------------------------ admission
    def submit(
        self,
        rid: str,
        task: Task,
        on_up: OnUp,
        on_failed: OnFailed,
        owner: str | None = None,
        planned: Plan | None = None,
    ) -> None:
        """Plan the chain and start down it (``corral.schedule.admit``); ``planned``: the chain
        the route already planned (the runtime's request carries it the same way)."""
        if planned is None:
            planned = plan(task, self.sim.catalog, clouds=self.clouds)
        if not planned.candidates:
            on_failed(rid, "; ".join(planned.reasons) or "no launchable candidate")
            return
        flow = Flow(rid, task, planned.candidates, on_up, on_failed, owner or rid, self.sim.now)
        flow.seq = self.submitted = self.submitted + 1
        if not self.shared_memory:
            flow.memory = BlockMemory()
        self.flows[rid] = flow
        self._advance(flow, -1, Within.ANY)

    def _blocks(self, flow: Flow) -> list[Block]:
        memory = flow.memory if flow.memory is not None else self.memory
        return memory.active(self.sim.now)

    def _remember(self, flow: Flow, block: Block | None, *, keep: bool = False) -> None:
        if block is not None:
            memory = flow.memory if flow.memory is not None else self.memory
            memory.add(block, self.sim.now, self.sim.timers.blocked_ttl_s, keep=keep)

    # ------------------------------------------------------------------ failover steps
    def _advance(self, flow: Flow, after: int, within: Within) -> None:
        """One failover step (``retry_region`` / ``retry_cloud`` / ``next_cloud``): planned
        by :func:`plan_step`, the runtime's own decision, and applied to the flow."""
        memory = flow.memory if flow.memory is not None else self.memory
        now = self.sim.now
        wait = None
        if not self.retry_until_up:  # Corral's rule: an exhausted chain waits, or fails
            terms = WaitTerms(flow.task.retry_until_up, flow.task.max_wait)
            wait = WaitPolicy(terms, self.backoff, flow.since, flow.retries, flow.rid)
        active, index = memory.indexed(now)
        decision = plan_step(Snapshot(flow.chain, after, within, active, now, wait, index=index))
        if isinstance(decision, Attempt):
            self._attempt(flow, decision.index, 0)
        elif self.retry_until_up:
            flow.memory = BlockMemory()  # a fresh walk: nothing remembered from the last one
            self.sim.after(self.sim.timers.retry_until_up_s, self._retry, flow)
        elif isinstance(decision, Fail):
            self._fail(flow, decision.text)
        else:
            self._wait(flow, decision, memory)

    def _retry(self, flow: Flow) -> None:
        if not flow.ended:
            self._advance(flow, -1, Within.ANY)

    def _wait(self, flow: Flow, decided: WaitUntil, memory: BlockMemory) -> None:
        """Corral's rule for an exhausted chain (the runtime's ``failover`` applies the same
        :class:`WaitUntil`): walk the chain again at ``decided.at``. A request whose every
        candidate is blocked is woken by the end of a block it waits on: a block renewed
        meanwhile (another request tried the place and failed) wakes it for nothing."""
        if flow.memory is None:  # the shared memory: a release of ours may wake it
            self.waiters[flow.rid] = flow
        waited = decided.waits_on
        if decided.because != "block_expiry" or len(waited) < len(flow.chain):
            self.sim.at(decided.at, self._wake, flow, flow.relaunches, flow.retries)
            return
        # Every candidate blocked: woken by one of these ending, or by its deadline.
        blocks = tuple({fields_of(block): None for block, _ in waited})
        wait = (flow.relaunches, flow.retries)
        if decided.deadline is not None:
            self.sim.at(decided.deadline, self._wake, flow, *wait)
        if decided.at == decided.deadline:
            return
        # Requests waiting on the same blocks are looked at together: one timer per set of
        # blocks, not per request, as blocks renewed by other requests' failures move them.
        key = (id(memory), blocks)
        group = self.block_waits.get(key)
        if group is None:
            group = self.block_waits[key] = _BlockWait(decided.at)
            self.sim.at(decided.at, self._due, memory, key, decided.at)
        elif decided.at < group.at:  # a block lifted and laid again, ending sooner
            group.at = decided.at
            self.sim.at(decided.at, self._due, memory, key, decided.at)
        group.flows.append((flow, wait))

    def _due(self, memory: BlockMemory, key: BlockWaitKey, at: float) -> None:
        """The first end of the blocks some requests wait on is due: walk each one's chain if
        one of them has ended (:func:`renewed_until`, the runtime's :func:`still_blocked`
        without its reason line; looked at again before each, as the one before may have
        renewed them); if every one was renewed meanwhile, wait for their new ends. A request
        relaunched, up, ended or woken otherwise since is dropped."""
        group = self.block_waits.get(key)
        if group is None or group.at != at:
            return  # looked at sooner
        del self.block_waits[key]
        until, blocks = memory.by_fields, key[1]
        left: list[tuple[Flow, tuple[int, int]]] = []
        renewed = None
        stale = True  # whether the blocks may have changed since ``renewed`` was worked out
        for flow, wait in group.flows:
            if flow.ended or flow.up or (flow.relaunches, flow.retries) != wait:
                continue
            if stale:  # only a walk changes them: looked at again after each
                renewed = renewed_until(
                    now=self.sim.now, ends=map(until.get, blocks, repeat(0.0)), deadline=None
                )
                stale = False
            if renewed is None:
                self._wake(flow, *wait)
                stale = True
            else:
                left.append((flow, wait))
        if not left:
            return
        if stale:
            renewed = renewed_until(
                now=self.sim.now, ends=map(until.get, blocks, repeat(0.0)), deadline=None
            )
        assert renewed is not None  # the last one left saw them renewed; nothing ran since
        again = self.block_waits.get(key)
        if again is None:
            again = self.block_waits[key] = _BlockWait(renewed[0])
            self.sim.at(renewed[0], self._due, memory, key, renewed[0])
        elif renewed[0] < again.at:
            again.at = renewed[0]
            self.sim.at(renewed[0], self._due, memory, key, renewed[0])
        again.flows[:0] = left

    def _wake(self, flow: Flow, relaunches: int, retries: int) -> None:
        """A waiting request's retry is due (or a release of ours freed a place of its chain):
        walk the whole chain again. A wake for a wait already over is dropped."""
        if flow.ended or flow.up or (flow.relaunches, flow.retries) != (relaunches, retries):
            return
        self.waiters.pop(flow.rid, None)
        flow.retries += 1
        self._advance(flow, -1, Within.ANY)

    def _attempt(self, flow: Flow, index: int, try_no: int) -> None:
        """One zone attempt: every node of the request in the candidate's zone, or none."""
        if flow.ended:
            return
        cand = flow.chain[index]
        if try_no == 0 and is_blocked(cand, self._blocks(flow)) is not None:
            self._advance(flow, index, Within.REGION)
            return
        place = Placement(cand.cloud, cand.region, cand.zone, cand.instance_type, cand.market)
        gpus = sum(cand.accelerators.values())
        flow.tries += 1
        call_s = self.sim.scenario.clouds[cand.cloud].call_s
        keys = [f"{flow.rid}/{flow.relaunches}/{flow.tries}/{n}" for n in range(cand.num_nodes)]
        try:
            got = self.sim.cloud.launch_all(place, self.sim.now, keys, gpus)
        except ThrottledError:
            if try_no < self.sim.timers.throttle_retries:
                wait_s = backoff_s(self.sim.timers.throttle_backoff_s, try_no) + call_s
                self.sim.after(wait_s, self._attempt, flow, index, try_no + 1)
            else:
                self.sim.after(call_s, self._advance, flow, index, Within.REGION)
            return
        except ProviderError as exc:
            self._remember(flow, self.block_for(exc, cand))
            wait_s = (
                self.sim.timers.attempt_deadline_s
                if isinstance(exc, LaunchTimeoutError)
                else self.sim.cloud.refused_after_s(place, exc)
            )
            if exc.scope == Scope.REQUEST:
                self.sim.after(wait_s, self._fail, flow, "the cloud refused the request")
            else:
                self.sim.after(wait_s, self._advance, flow, index, Within.REGION)
            return
        flow.instances = got
        for inst in got:
            inst.owner = flow.owner
            self.by_instance[inst.iid] = flow
            self.sim.launched(inst)
        self.sim.at(max(i.up_at for i in got), self._booted, flow, got)

    def block_for(self, exc: ProviderError, cand: Placed) -> Block | None:
        """What the failure blocks: the runtime's rule (``attempt_record.remember``), or with
        ``wide_blocks`` the rule before issue #46 (a machine pool's launches follow it too)."""
        if self.wide_blocks:
            scope = Scope.REGION if exc.scope == Scope.FAMILY else exc.scope
            return Block.from_scope(scope, cand)
        return Block.for_error(exc, cand)

    def _booted(self, flow: Flow, got: Sequence[SimInstance]) -> None:
        if flow.ended or flow.instances is not got or any(i.ended_at is not None for i in got):
            return  # ended, or lost on the way up (its loss already handled)
        flow.up = True
        flow.on_up(flow.rid, list(got))

    # ------------------------------------------------------------------ ends
    def release(self, rid: str) -> None:
        """The request is over: terminate its machines."""
        flow = self.flows.pop(rid, None)
        if flow is None:
            return
        flow.ended = True
        self.waiters.pop(rid, None)
        self._release(flow.instances)
        if flow.up and flow.memory is None:
            self._freed([inst.place for inst in flow.instances])

    def _freed(self, places: Sequence[Placement]) -> None:
        """Our machines at ``places`` ended on purpose (the runtime's
        ``failover.capacity_freed``): the blocks they lift end, and the oldest
        waiting requests whose chains hold those places walk them now, one per machine."""
        if not places:
            return
        lifted = {b: None for p in places for b in lifted_by_release(p)}
        if not self.memory.lift(list(lifted), self.sim.now) and not self.waiters:
            return
        freed = [place_key(p) for p in places]
        # Only a request whose chain holds a freed place can be woken: the others are passed
        # over here rather than walked step by step by woken_by_release (the same choice).
        places_freed = frozenset(freed)
        waiting = sorted(
            (f for f in self.waiters.values() if not places_freed.isdisjoint(f.place_keys())),
            key=lambda f: f.seq,
        )
        for rid in woken_by_release(freed, [(f.rid, f.chain) for f in waiting]):
            flow = self.waiters.pop(rid)  # chosen once, even if another ends at this instant
            self.sim.after(0.0, self._wake, flow, flow.relaunches, flow.retries)

    def _release(self, instances: Sequence[SimInstance]) -> None:
        for inst in instances:
            self.by_instance.pop(inst.iid, None)
            self.sim.cloud.end(inst, self.sim.now)

    def _fail(self, flow: Flow, why: str) -> None:
        if flow.ended:
            return
        self.release(flow.rid)
        flow.on_failed(flow.rid, why)

    def owns(self, inst: SimInstance) -> bool:
        return inst.iid in self.by_instance

    def lost(self, inst: SimInstance) -> None:
        """A machine of a request was taken back: its zone remembered (``lost``), the rest of
        its machines let go, the request relaunched down a fresh chain (reconcile's relaunch)."""
        flow = self.by_instance.pop(inst.iid, None)
        if flow is None or flow.ended:
            return
        place = inst.place
        self._remember(
            flow,
            Block(place.cloud, place.region, place.zone, place.instance_type, place.market),
            keep=True,
        )
        self._release([i for i in flow.instances if i is not inst])
        flow.instances, flow.up = [], False
        planned = plan(flow.task, self.sim.catalog, clouds=self.clouds)
        # The runtime's rule (reconcile.relaunch): relaunch_limit losses in a row unless the
        # task has a job_recovery; the zones it lost machines in tried last.
        decided = relaunch_after_loss(
            planned.candidates,
            flow.task.recovery(),
            Loss(place.cloud, place.region, place.zone, ran_s=self.sim.now - inst.launched_at),
            lost_zones=flow.lost_zones,
            in_a_row=flow.lost_in_a_row,
            limit=self.relaunch_limit,
            reset_s=self.sim.timers.relaunch_reset_s,
        )
        if isinstance(decided, str):
            self._fail(flow, decided)
            return
        flow.lost_zones.append((place.cloud, place.zone))
        flow.lost_in_a_row = decided.in_a_row
        flow.relaunches += 1
        flow.since, flow.retries = self.sim.now, 0  # a fresh wait after a relaunch
        if flow.owner in self.sim.recorder.requests:
            self.sim.stat(flow.owner).recoveries += 1
        flow.chain = decided.chain
        self._advance(flow, -1, Within.ANY)
