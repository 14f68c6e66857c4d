"""Playing a fake cluster's pods: each pod the fake API server accepted is booted once as a
sandboxed machine running its container's command (the node agent's boot script), as the
AWS tests play a VM from its UserData."""

from __future__ import annotations

import threading
from pathlib import Path

from cloud_vms import Fleet, Vm
from fakes.k8s_api import FakeKube


class PodPlayer:
    """Boots every pod the fake accepts, once, as a sandboxed machine running its command,
    and powers it off once the pod is deleted."""

    def __init__(self, kube: FakeKube, root: Path) -> None:
        self.kube, self.fleet = kube, Fleet(root)
        self.booted: dict[str, Vm] = {}
        self.most_live = 0  # the most pods the cluster held at once, as sampled
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            with self.kube.lock:
                new = [p for p in self.kube.created if p["metadata"]["name"] not in self.booted]
                live = {name for _ns, name in self.kube.pods}
            self.most_live = max(self.most_live, len(live))
            for pod in new:
                script = str(pod["spec"]["containers"][0]["command"][2])
                self.booted[pod["metadata"]["name"]] = self.fleet.boot(script)
            for name, vm in self.booted.items():
                if name not in live and vm.alive():
                    vm.power_off()  # the pod was deleted: its container stops

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.fleet.kill_all()
