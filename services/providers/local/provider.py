"""The local cloud provider: instances are node agent processes on this machine.

Capacity, reservations, faults and launch delays come from the local cloud file
(:mod:`corral.shared.config.localcloud`); the cloud's own records live in Redis
(:mod:`.state`), so every worker process sees the same cloud. Each instance is one agent
process in a session of its own: it outlives the worker that launched it, as a VM outlives the
API call that created it. On Linux the cloud's launcher (:mod:`.launcher`) forks it, so a
launch call costs about what a cloud's API call does; elsewhere it is a new
``python -m corral.services.providers.local.agent`` interpreter.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from corral.services.agent.pgroup import kill_group
from corral.services.agent.sandbox import assignment_log
from corral.services.providers.base import (
    TAG_ATTEMPT,
    TAG_MANAGED,
    TAG_NODE,
    TAG_REQUEST,
    Features,
    LaunchSpec,
    ProviderInstance,
    checked_assignment,
    status_view,
)
from corral.services.providers.local import launcher
from corral.services.providers.local.faults import play_injected
from corral.services.providers.local.folders import (
    DEMAND_FILE,
    assignment_uid,
    hand_job_bundle,
    machine_files,
    remove_folders,
    since,
    tail,
)
from corral.services.providers.local.processes import (
    pid_belongs_to,
    task_groups,
)
from corral.services.providers.local.state import (
    ENDED_RECORD_TTL_S,
    LOCAL_ADDRESS,
    LOST,
    PENDING,
    TAG_FAULT,
    TERMINATED,
    TERMINATING,
    UNREGISTERED,
    CloudState,
    InstanceRecord,
    bound_ids,
    derive_state,
)
from corral.services.queues.redis_conn import connect
from corral.services.settings import default_machines_dir
from corral.services.state.outage import OutageBook
from corral.shared.catalog.offering import Offering
from corral.shared.config.localcloud import LocalCloud
from corral.shared.errors import (
    CapacityError,
    InvalidRequestError,
    ProviderError,
    Scope,
    ThrottledError,
)
from corral.shared.reservations import reservation_of

AGENT_MODULE = "corral.services.providers.local.agent"


HELD_MAX = 20_000  # live records a provider keeps the fixed fields of

log = logging.getLogger(__name__)
ATTEMPT_POLL_S = 0.05
CLAIM_MARGIN_S = 3.0  # how long the caller that binds an attempt has to start its agents

# The zone's injected error kinds as the typed errors a real cloud's SDK errors become.


class LocalProvider:
    """The ``local`` cloud. Thread-safe; any number of processes may share one Redis."""

    name = "local"
    poll_interval_s = 0.05  # its records are in the same Redis: polling is cheap
    # A local machine is a process: it cannot be stopped and kept. A launch ends by itself
    # (the launcher's socket timeout, Redis patience, the attempt claim's wait): the runtime
    # calls it without a watchdog thread. The boot watch reads its launches by attempt. Its
    # agents report through Redis, not the API.
    features = Features(bounded_launch=True, describe_launches=True, shared_network=True)

    def __init__(
        self,
        cloud: LocalCloud,
        redis_url: str,
        *,
        prefix: str = "corral",
        python: str = sys.executable,
        log_dir: Path,
        bundle_store: str | None = None,
        bundle_store_endpoint: str | None = None,
        heartbeat_s: float = 1.0,
        heartbeat_timeout_s: float = 10.0,
        start_timeout_s: float = 60.0,
        terminate_grace_s: float = 10.0,
        attempt_wait_s: float = 30.0,
        redis_patience_s: float = 30.0,
        outage_gap_s: float = 5.0,
        machines_dir: Path | None = None,
        task_uid: int | None = None,
    ) -> None:
        """``machines_dir``: where each machine's folder (its HOME) is made, never inside
        Corral's home (None: the settings' default for the home above ``log_dir``);
        ``task_uid``: the first of the unprivileged users tasks run as (Corral runs as root:
        the machines' own work as this uid, each assignment as one of its own after it),
        None: as Corral's user."""
        self.cloud = cloud
        self.redis_url = redis_url
        self.prefix = prefix
        self.python = python
        self.log_dir = Path(log_dir)
        # Where bundles' bytes are (services/state/blobs.py): the agent reads its own there.
        self.bundle_store = bundle_store or (self.log_dir.parent / "bundles").absolute().as_uri()
        self.bundle_store_endpoint = bundle_store_endpoint  # an s3:// store's (tests: moto's)
        self.heartbeat_s = heartbeat_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.start_timeout_s = start_timeout_s
        self.terminate_grace_s = terminate_grace_s
        self.attempt_wait_s = attempt_wait_s
        client = connect(redis_url, patience_s=redis_patience_s, decode_responses=True)
        self.state = CloudState(client, prefix)
        self.outage = OutageBook(client, prefix, outage_gap_s)
        self.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # logs hold task output
        self.task_uid = task_uid
        self.machines_dir = Path(machines_dir or default_machines_dir(self.log_dir.parent))
        # Its users may pass through it to their own folders, never list it.
        self.machines_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.machines_dir, 0o711 if task_uid is not None else 0o700)
        self._ended: dict[str, InstanceRecord] = {}  # ended records seen (they never change)
        # Live records read before: a look reads only what changes of them (their fixed
        # fields, written by the launch, are taken from here).
        self._held: dict[str, InstanceRecord] = {}
        # One launcher per cloud, shared by every process that launches on it.
        key = f"{python}\0{prefix}\0{self.log_dir.resolve()}\0{redis_url}"
        self._launcher: str | None = (
            hashlib.sha256(key.encode()).hexdigest()[:20] if sys.platform == "linux" else None
        )

    def has_credentials(self) -> bool:
        return True

    def offerings(self) -> list[Offering]:
        """The local cloud file's offerings (every zone's types, sold-out ones too)."""
        return self.cloud.offerings()

    def zones_of(self, instance_type: str, reservation_id: str | None) -> list[tuple[str, str]]:
        return self.cloud.placements(instance_type, reservation_id)

    # --- launch ----------------------------------------------------------------------------
    def launch(self, spec: LaunchSpec) -> list[ProviderInstance]:
        """Start ``spec.count`` agents in the zone, all or none; idempotent by attempt id."""
        pool, limit, market, reservation_id = self._placement(spec)
        for _ in range(3):
            # The attempt is taken by the script that binds its capacity (no claim of its own
            # before it: a Redis command less per launch); a caller that finds it bound waits
            # for the agents that caller starts.
            launched = self._bind_and_start(spec, pool, limit, market, reservation_id)
            if launched is not None:
                return launched
            ids = self._await_attempt(spec.attempt_id, CLAIM_MARGIN_S + self.attempt_wait_s)
            if ids is not None:
                self._finish_boot(spec, ids)
                return self._instances(ids)
            # The other caller failed and gave the attempt back: try it ourselves.
        raise ThrottledError(f"attempt {spec.attempt_id} keeps changing hands; retry")

    def _placement(self, spec: LaunchSpec) -> tuple[str, int, str, str | None]:
        """Where the instances' capacity comes from: (pool key, its limit, market, reservation)."""
        if spec.cloud != self.name:
            raise InvalidRequestError(f"cloud {spec.cloud!r} sent to the local provider")
        if spec.count < 1:
            raise InvalidRequestError(f"count must be at least 1, got {spec.count}")
        try:
            zone = self.cloud.zone(spec.zone)
            region = self.cloud.region_of(spec.zone)
            itype = self.cloud.instance_type(spec.instance_type)
        except KeyError as exc:
            raise InvalidRequestError(f"the local cloud has no {exc.args[0]!r}") from None
        if region != spec.region:
            raise InvalidRequestError(f"zone {spec.zone} is in region {region}, not {spec.region}")
        if not zone.offers(itype.name):
            raise InvalidRequestError(
                f"{itype.name} is not offered in {zone.name}", code="Unsupported", scope=Scope.ZONE
            )
        reservation_id = _reservation_id(spec)
        if reservation_id is not None or spec.market == "reserved":
            return self._reserved_placement(spec, itype.name, reservation_id)
        if spec.market == "spot" and itype.spot_price_usd_per_hour is None:
            raise InvalidRequestError(
                f"{itype.name} has no spot market",
                code="SpotUnsupported",
                scope=Scope.INSTANCE_TYPE,
            )
        if spec.market not in ("on_demand", "spot"):
            raise InvalidRequestError(f"unknown market {spec.market!r}")
        pool = self.state.keys.pool(zone.name, itype.name)
        return pool, zone.capacity[itype.name], spec.market, None

    def _reserved_placement(
        self, spec: LaunchSpec, type_name: str, reservation_id: str | None
    ) -> tuple[str, int, str, str | None]:
        if reservation_id is None:
            raise InvalidRequestError("market 'reserved' needs a reservation id")
        try:
            res = self.cloud.reservation(reservation_id)
        except KeyError:
            raise InvalidRequestError(
                f"no reservation {reservation_id!r}", code="InvalidCapacityReservationId.NotFound"
            ) from None
        if (res.zone, res.instance_type) != (spec.zone, type_name):
            raise InvalidRequestError(
                f"reservation {res.id} holds {res.instance_type} in {res.zone}, "
                f"not {type_name} in {spec.zone}",
                code="InvalidCapacityReservationId.Mismatch",
            )
        return self.state.keys.reservation(res.id), res.count, "reserved", res.id

    def _await_attempt(self, attempt_id: str, wait_s: float) -> list[str] | None:
        """Wait for the caller holding the attempt: its ids, or None if it gave it back."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            value = self.state.attempt_value(attempt_id)
            if value is None:
                return None
            if not value.startswith("pending:"):
                return bound_ids(value)
            time.sleep(ATTEMPT_POLL_S)
        raise ThrottledError(f"attempt {attempt_id} is still being launched by another caller")

    def _bind_and_start(
        self,
        spec: LaunchSpec,
        pool: str,
        limit: int,
        market: str,
        reservation_id: str | None,
    ) -> list[ProviderInstance] | None:
        """Launch the attempt if no caller has bound it yet; None if one has."""
        played = play_injected(self.cloud, self.state, spec)  # the zone's injected error
        if played is True:
            return None
        # Whoever binds the capacity to the attempt starts its agents, within CLAIM_MARGIN_S
        # of the records' creation: a caller that sees the binding waits that long for them,
        # or it would start the same agents again. If this process dies before it started
        # them, a redelivered attempt starts them after that margin instead of waiting on
        # machines nobody will start (_finish_boot).
        delay_s = self.cloud.zone(spec.zone).launch_delay_s
        mute = played == UNREGISTERED  # its agents start but never register
        records = self._new_records(spec, pool, market, reservation_id, mute=mute)
        status, used = self.state.reserve(pool, limit, spec.attempt_id, records)
        if status == -2:  # an id collision: practically impossible, but never reuse an id
            records = self._new_records(spec, pool, market, reservation_id, mute=mute)
            status, used = self.state.reserve(pool, limit, spec.attempt_id, records)
        if status == 0:
            what = f"reservation {reservation_id}" if reservation_id else spec.zone
            free = max(0, limit - used)
            raise CapacityError(
                f"{what} has {free} of {limit} {spec.instance_type} free, asked for {spec.count}",
                code="ReservationCapacityExceeded" if reservation_id else "InsufficientCapacity",
                free=free,  # a shortfall blocks only asks of more than that
            )
        if status == -1:
            return None  # another caller bound the attempt first
        try:
            for rec in records:
                self._start_agent(rec, boot_delay_s=delay_s)  # it boots by itself, later
        except OSError as exc:
            for rec in records:  # the roll-back signals what started by its recorded pid
                if rec.pid is not None:
                    self.state.set_fields(rec.id, pid=rec.pid)
            self._roll_back(records)
            self.state.unbind_attempt(spec.attempt_id, records)
            raise ProviderError(f"could not start the node agent: {exc}") from exc
        # Pids written in one round trip (read back only where a terminate came meanwhile).
        states = self.state.started(records)
        # A terminate() that came while we were starting them saw no pid to signal: finish it.
        read = list(zip(records, states, strict=True))
        stopped = [r.id for r, state in read if state not in (None, PENDING)]
        if stopped:
            self.terminate(stopped)
            return self._instances([rec.id for rec in records])
        # The rest are as this call wrote them, their agents just started (not heard yet: a
        # describe tells when they are).
        return [self._to_instance(self._observe(r, None)) for r, state in read if state is not None]

    def _finish_boot(self, spec: LaunchSpec, ids: list[str]) -> None:
        """Start the agents of a bound attempt whose launcher died before it started them
        (each boots for what is left of the zone's launch delay). Its launcher has
        CLAIM_MARGIN_S from the records' creation to start them; after that, one caller (the
        one that takes the resume lease) starts what is left."""
        boot = self.state.keys.start_lease(spec.attempt_id)
        delay_s = self.cloud.zone(spec.zone).launch_delay_s
        deadline = time.monotonic() + 2 * CLAIM_MARGIN_S
        lease_ms = int(CLAIM_MARGIN_S * 1000)
        while time.monotonic() < deadline:
            unborn = self._unborn(ids)
            if not unborn:
                return
            token = f"resume:{secrets.token_hex(8)}"
            launcher_s = max(rec.created_at for rec in unborn) + CLAIM_MARGIN_S
            if time.time() >= launcher_s and self.state.r.set(boot, token, nx=True, px=lease_ms):
                # Look again now that the lease is ours: the launcher may have started them
                # (late) between our look and our taking it.
                unborn = self._unborn(ids)
                try:
                    for rec in unborn:
                        left = max(0.0, delay_s - (time.time() - rec.created_at))
                        self._start_agent(rec, boot_delay_s=left)
                finally:  # what did start is recorded either way (the lease lapses)
                    self.state.started(unborn)
                return
            time.sleep(ATTEMPT_POLL_S)  # its launcher's time, or another caller's lease
        raise ThrottledError(f"attempt {spec.attempt_id} is still booting elsewhere; retry")

    def _unborn(self, ids: list[str]) -> list[InstanceRecord]:
        """The attempt's instances whose agent was never started."""
        records = [r for r in map(self.state.record, ids) if r is not None]
        return [r for r in records if r.pid is None and r.start_at is None and r.state == PENDING]

    def _new_records(
        self,
        spec: LaunchSpec,
        pool: str,
        market: str,
        reservation_id: str | None,
        *,
        mute: bool = False,
    ) -> list[InstanceRecord]:
        itype = self.cloud.instance_type(spec.instance_type)
        now = time.time()
        records = []
        for i in range(spec.count):
            iid = "li-" + secrets.token_hex(6)
            node = spec.tags.get(TAG_NODE, "0") if spec.count == 1 else str(i)
            tags = {
                **spec.tags,
                TAG_MANAGED: "true",
                TAG_REQUEST: spec.request_id,
                TAG_ATTEMPT: spec.attempt_id,
                TAG_NODE: node,
                **({TAG_FAULT: UNREGISTERED} if mute else {}),
            }
            envs = {
                **spec.envs,
                "CORRAL_INSTANCE_ID": iid,
                "CORRAL_NODE_RANK": node,
                "CORRAL_NUM_NODES": str(spec.count),
                # Work queued on the node: JSON {"bundles": [...], "placement_groups": [...]}
                # written here is reported with every heartbeat (autoscaled clusters read it).
                # In the machine's own folder: no task's environment names Corral's home.
                "CORRAL_DEMAND_FILE": str(self.machines_dir / iid / DEMAND_FILE),
            }
            records.append(
                InstanceRecord(
                    id=iid,
                    request_id=spec.request_id,
                    attempt_id=spec.attempt_id,
                    region=spec.region,
                    zone=spec.zone,
                    instance_type=itype.name,
                    market=market,
                    pool=pool,
                    log_path=str(self.log_dir / f"{iid}.log"),
                    created_at=now,
                    vcpus=itype.vcpus,
                    memory_gib=itype.memory_gib,
                    accelerators={k.upper(): v for k, v in itype.accelerators.items()},
                    tags=tags,
                    envs=envs,
                    setup=spec.setup,
                    run=spec.run,
                    workdir=spec.workdir,
                    files=self._files(spec.files, iid),
                    reservation_id=reservation_id,
                )
            )
        return records

    def _files(self, files: dict[str, Any], iid: str) -> dict[str, Any]:
        """The machine's files with its folder, logs, user and bundle (folders.machine_files)."""
        return machine_files(
            files,
            self.machines_dir / iid,
            logs=self.log_dir,
            uid=self.task_uid,
            bundle_store=self.bundle_store,
            bundle_store_endpoint=self.bundle_store_endpoint,
        )

    def _start_agent(self, rec: InstanceRecord, boot_delay_s: float = 0.0) -> None:
        """One detached agent process for the instance. It stays silent (booting) for
        ``boot_delay_s`` before it starts its work. On Linux the cloud's launcher forks it
        (a millisecond, see launcher.py) and it carries the instance id as its name; elsewhere,
        or if the launcher fails, it is a new interpreter whose command line carries the id."""
        args = [
            "--instance-id",
            rec.id,
            "--prefix",
            self.prefix,
            "--heartbeat-s",
            str(self.heartbeat_s),
            "--heartbeat-ttl-s",
            str(self.heartbeat_timeout_s),
            "--kill-grace-s",
            str(self.terminate_grace_s / 2),
        ]
        # The Redis URL may hold a password: the environment (a pipe), not the command line.
        if self._launcher is not None:
            # The launcher plays the boot: it forks the agent once the boot is over (no
            # process before then), and that agent records its own pid.
            later = ["--own-pid"] if boot_delay_s > 0 else []
            request: dict[str, Any] = {
                "argv": [*args, *later],
                "log": rec.log_path,
                "env": {"CORRAL_REDIS_URL": self.redis_url},
                "name": rec.id,
                "record": rec.to_hash(),  # the agent need not read it back from Redis
            }
            if later:
                request["start_in_s"] = boot_delay_s
            try:
                pid = launcher.start_agent(self._launcher, self.python, request)
            except (OSError, ValueError, launcher.LauncherError) as exc:
                log.warning("local launcher unavailable (%s); starting agents directly", exc)
                self._launcher = None
            else:
                # Recorded by the caller (CloudState.started), with its others.
                rec.pid = pid
                rec.start_at = time.time() + boot_delay_s if pid is None else None
                return
        args += ["--boot-delay-s", str(boot_delay_s)]
        rec.pid = self._spawn_agent(rec, args)

    def _spawn_agent(self, rec: InstanceRecord, args: list[str]) -> int:
        # The Redis URL goes through a pipe, not the agent's environment: a task can read its
        # agent's /proc/<pid>/environ (the same user), and the URL may hold a password.
        fd = os.open(rec.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with open(fd, "ab") as out:
            proc = subprocess.Popen(
                [self.python, "-m", AGENT_MODULE, *args, "--redis-url-stdin"],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own session: it outlives the launching worker
                close_fds=True,
                env=launcher.public_env(),
            )
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write((self.redis_url + "\n").encode())
        proc.stdin.close()
        # Reap it when it exits, so no zombie lingers while this process lives.
        threading.Thread(target=proc.wait, name=f"reap-{rec.id}", daemon=True).start()
        return proc.pid

    def stop_launcher(self) -> None:
        """Stop this cloud's launcher (its agents run on); it also exits when idle."""
        if self._launcher is not None:
            launcher.stop(self._launcher)

    def _roll_back(self, records: list[InstanceRecord]) -> None:
        """A multi-node launch gets all its nodes or none: stop what did start."""
        started = [rec.id for rec in records if rec.pid is not None]
        self.terminate(started)
        for rec in records:
            self.state.finish(
                rec, state=TERMINATED, exit_code=None, reason="launch_failed", now=time.time()
            )

    # --- describe --------------------------------------------------------------------------
    def describe(self, tags: dict[str, str] | None = None) -> list[ProviderInstance]:
        """Every instance the local cloud knows (ended ones for a day), filtered by tags. It
        pulses the control plane first, so an outage just ended is known before anyone's
        silence is judged. An ended record is read once per provider (it never changes), so a
        look reads the live instances only."""
        outage_end = self.outage.pulse()
        ids = self.state.instance_ids()
        for gone in set(self._ended).difference(ids):
            self._ended.pop(gone, None)  # forgotten by the cloud: its record expired
        return self._instances(ids, tags, outage_end)

    def describe_launches(
        self, attempt_ids: Iterable[str], outage_end: float | None = None
    ) -> list[ProviderInstance]:
        """What :meth:`describe` reports of these launches' instances only (the boot watch's
        look at the machines on their way up, not at every machine the cloud knows).
        ``outage_end``: what the caller's pulse just returned (else this call pulses)."""
        if outage_end is None:
            outage_end = self.outage.pulse()
        return self._instances(self.state.launched_ids(list(attempt_ids)), None, outage_end)

    def _instances(
        self,
        ids: Iterable[str],
        tags: dict[str, str] | None = None,
        outage_end: float | None = None,
    ) -> list[ProviderInstance]:
        if outage_end is None:
            outage_end = self.outage.last_end()
        ids = list(ids)
        now = time.time()
        ended = self._ended
        # An ended record never changes (only its expiry is left): read once per process, so a
        # look costs what is still live, not every instance of the last day.
        fresh = [i for i in ids if (e := ended.get(i)) is None or _expired(e, now)]
        held = self._held
        if len(held) > HELD_MAX:
            held.clear()  # records of machines this process no longer looks at
        read = {i: (rec, beat) for i, rec, beat in self.state.records_and_heartbeats(fresh, held)}
        out = []
        for iid in ids:
            if iid in read:
                rec, beat = read[iid]
                if rec is None:
                    ended.pop(iid, None)
                    held.pop(iid, None)
                    self.state.forget(iid)
                    continue
                if tags and any(rec.tags.get(k) != v for k, v in tags.items()):
                    continue
                rec = self._observe(rec, beat, outage_end)
                if rec.ended:
                    ended[iid] = rec
                    held.pop(iid, None)
                else:
                    held[iid] = rec
            else:
                rec = ended[iid]
                if tags and any(rec.tags.get(k) != v for k, v in tags.items()):
                    continue
            out.append(self._to_instance(rec))
        return out

    def _observe(
        self, rec: InstanceRecord, beat: dict[str, object] | None, outage_end: float = 0.0
    ) -> InstanceRecord:
        """Derive the state; record the end of an instance whose process vanished."""
        if rec.ended:
            return rec
        now = time.time()
        start_timeout_s = self.start_timeout_s + self._boot_delay(rec.zone)
        if rec.pid is None and rec.state == PENDING and now - rec.created_at < start_timeout_s:
            return rec  # booting, its agent not started yet: the record says it all
        alive = rec.pid is not None and self.pid_belongs_to(rec.pid, rec.id)
        if not alive:
            # Read again: it may have just written its final record, or just been started.
            rec = self.state.record(rec.id) or rec
            if rec.ended:
                return rec
            alive = rec.pid is not None and self.pid_belongs_to(rec.pid, rec.id)
        state = derive_state(
            rec,
            beat,
            alive=alive,
            now=now,
            heartbeat_timeout_s=self.heartbeat_timeout_s,
            # Booting machines are silent for the zone's launch delay: not lost yet.
            start_timeout_s=start_timeout_s,
            outage_end=outage_end,
        )
        if not alive and state == LOST:
            final = TERMINATED if rec.state == TERMINATING else LOST
            reason = "terminated" if final == TERMINATED else "process gone without a final record"
            self.state.finish(rec, state=final, exit_code=None, reason=reason, now=time.time())
            rec = self.state.record(rec.id) or rec
            state = rec.state
        rec.state = state
        return rec

    def _boot_delay(self, zone: str) -> float:
        try:
            return float(self.cloud.zone(zone).launch_delay_s)
        except KeyError:
            return 0.0  # a zone the cloud file no longer has

    def _to_instance(self, rec: InstanceRecord) -> ProviderInstance:
        return ProviderInstance(
            provider_id=rec.id,
            cloud=self.name,
            region=rec.region,
            zone=rec.zone,
            instance_type=rec.instance_type,
            market=rec.market,
            state=rec.state,
            silent=rec.state == LOST and not rec.ended,  # alive, quiet: never ended as lost
            started=rec.pid is not None,  # its process runs (booted), whatever its agent said
            pid=rec.pid,
            address=LOCAL_ADDRESS,
            tags=rec.tags,
            exit_code=rec.exit_code,
        )

    def read_log(
        self, provider_id: str, attempt_id: str | None, node_index: int, tail_bytes: int
    ) -> bytes:
        """The tail of the agent's log file (its own lines and its task's output)."""
        return tail(self.log_dir / f"{provider_id}.log", tail_bytes)

    def read_log_since(
        self, provider_id: str, attempt_id: str | None, node_index: int, offset: int
    ) -> tuple[int, bytes]:
        """The agent's log file from byte ``offset`` on (a file only grows)."""
        return since(self.log_dir / f"{provider_id}.log", offset)

    def read_assignment_log(self, provider_id: str, aid: str, tail_bytes: int) -> bytes:
        """The tail of one assignment's own output (never its machine's log)."""
        return tail(assignment_log(self.log_dir, provider_id, aid), tail_bytes)

    def read_assignment_log_since(
        self, provider_id: str, aid: str, offset: int
    ) -> tuple[int, bytes]:
        """One assignment's own output from byte ``offset`` on."""
        return since(assignment_log(self.log_dir, provider_id, aid), offset)

    def log_path(self, instance_id: str) -> Path | None:
        """Where the instance's output goes (the agent's and its task's), if known."""
        rec = self.state.record(instance_id)
        return Path(rec.log_path) if rec else None

    # --- assignments (warm machines) -------------------------------------------------------
    def assign(self, provider_id: str, assignment: dict[str, Any]) -> None:
        """Give an idle machine (launched without ``run``) one more piece of work:
        ``assignment`` is ``{id, setup, run, envs, workdir}``, ``id`` required and never reused
        on the machine (an id that ended there does not run again). The machine runs all its
        assignments at once; assigning an id it has already replaces the stored one. The agent
        picks it up on its next heartbeat; :meth:`assignment_status` tells how it went."""
        body = checked_assignment(assignment)
        rec = self.state.record(provider_id)
        if rec is None or rec.ended:
            raise InvalidRequestError(f"no live instance {provider_id!r} to assign to")
        if rec.run:
            raise InvalidRequestError(f"{provider_id} runs a task of its own; it takes none")
        if self.task_uid is not None:  # a user of its own, none of another assignment's
            body["uid"] = assignment_uid(self.task_uid, self.state.next_uid())
        self.state.put_assignment(provider_id, body)

    def withdraw(self, provider_id: str, assignment_id: str | None = None) -> None:
        """Take one assignment back (or, ``assignment_id`` None, all of them): the agent stops
        its processes and records it ``withdrawn``. Idempotent."""
        self.state.drop_assignment(provider_id, assignment_id)

    def assignment_status(self, provider_id: str) -> dict[str, Any]:
        """The machine's assignments in one round trip (see :func:`.base.status_view`)."""
        assigned, beat, results = self.state.assignment_view(provider_id)
        return status_view(assigned, beat, results)

    def report(self, provider_id: str) -> dict[str, Any] | None:
        """The agent's last heartbeat, None when it is silent."""
        return self.state.last_beat(provider_id)

    def ended_work(self) -> list[str]:
        """Machines whose agents recorded an assignment's end since the last call."""
        return self.state.take_ended_work()

    def hand_job_bundle(self, provider_id: str, scope: str, sha256: str) -> None:
        """A queued job's own workdir bundle, beside the machine's folder (folders.py)."""
        files = rec.files if (rec := self.state.record(provider_id)) else {}
        hand_job_bundle(files, self.bundle_store, self.bundle_store_endpoint, scope, sha256)

    def agent_name(self, provider_id: str, attempt_id: str | None, node_index: int) -> str:
        """A local agent goes by its machine's id."""
        return provider_id

    @property
    def node_work(self) -> LocalProvider:
        """Every local machine runs an agent: the provider hands them their work itself."""
        return self

    # --- terminate -------------------------------------------------------------------------
    def terminate(self, provider_ids: list[str], zone: str | None = None) -> None:
        """Stop the agents (SIGTERM, SIGKILL after the grace period) and free their capacity.
        Idempotent: unknown and ended ids are fine. Returns once the processes are gone."""
        # An ended record is final (its state, its task groups): one this process has read
        # (a look just saw the machine end) is not read again, and nothing of it is written.
        records = [rec for rec in map(self._record_to_end, provider_ids) if rec is not None]
        live = [rec for rec in records if not rec.ended]
        unstarted = []
        for rec in live:
            # The pid as recorded now: an agent started since the record was read is
            # signalled; one not started yet is stopped by its starter (CloudState.started),
            # or does not start (the launcher keeps it for its boot's end: told below).
            pid = self.state.set_state(rec.id, TERMINATING)
            if pid:
                rec.pid = pid
            elif pid == 0:
                unstarted.append(rec.id)
            self._signal(rec.pid, rec.id, signal.SIGTERM)
        if unstarted and self._launcher is not None:
            # It would start and, finding its machine terminating, exit at once: a fork
            # saved. Nothing lost if the launcher cannot be asked.
            with contextlib.suppress(OSError, ValueError, launcher.LauncherError):
                launcher.cancel(self._launcher, unstarted)
        self._wait_gone(records, self.terminate_grace_s)
        for rec in records:
            self._signal(rec.pid, rec.id, signal.SIGKILL)
            final = rec if rec.ended else self.state.record(rec.id) or rec
            for child in task_groups(final):
                kill_group(child, signal.SIGKILL)  # the agent could not stop its task
        self._wait_gone(records, 2.0)
        for rec in records:
            if not rec.ended:
                self.state.finish(
                    rec, state=TERMINATED, exit_code=None, reason="terminated", now=time.time()
                )
            if not rec.run:  # a job's machine was never given any (assign refuses it)
                self.state.drop_assignment(rec.id)  # a gone machine takes no work
        remove_folders(self.machines_dir, [rec.id for rec in records])

    def _record_to_end(self, instance_id: str) -> InstanceRecord | None:
        rec = self._ended.get(instance_id)
        live = rec is None or _expired(rec, time.time())
        return self.state.record(instance_id) if live else rec

    def power_off(self) -> int:
        """Kill every agent and its task at once, as a power cut would, leaving the records as
        they are: whoever looks next finds the instances lost. Returns how many were alive."""
        self.stop_launcher()
        killed = 0
        for iid in self.state.instance_ids():
            rec = self.state.record(iid)
            if rec is None or rec.ended:
                continue
            alive = rec.pid is not None and self.pid_belongs_to(rec.pid, rec.id)
            if alive:
                kill_group(rec.pid, signal.SIGKILL)  # type: ignore[arg-type]
                killed += 1
            for child in task_groups(rec):
                kill_group(child, signal.SIGKILL)  # the task has a session of its own
        return killed

    def _signal(self, pid: int | None, instance_id: str, sig: signal.Signals) -> None:
        # Pids are reused: signal only a process whose command line names this instance.
        if pid is not None and self.pid_belongs_to(pid, instance_id):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def _wait_gone(self, records: list[InstanceRecord], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not any(
                rec.pid is not None and self.pid_belongs_to(rec.pid, rec.id) for rec in records
            ):
                return
            time.sleep(0.05)

    @staticmethod
    def pid_belongs_to(pid: int, instance_id: str) -> bool:
        """Whether ``pid`` is a live process of this instance; see :func:`pid_belongs_to`."""
        return pid_belongs_to(pid, instance_id)


def _expired(rec: InstanceRecord, now: float) -> bool:
    """Whether an ended record may have expired by now (read it again to know)."""
    return now - (rec.ended_at or 0.0) >= ENDED_RECORD_TTL_S


def _reservation_id(spec: LaunchSpec) -> str | None:
    """The reservation named by the spec, or by its advanced_instance_config in AWS's or
    GCP's spelling (``shared.reservations.reservation_of``, the one reading)."""
    if spec.reservation_id:
        return str(spec.reservation_id)
    return reservation_of(spec.advanced_instance_config)
