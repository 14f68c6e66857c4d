"""A two-node rendezvous as SkyPilot's distributed examples make one, for the tests of
SkyPilot's runtime environment (test_skypilot_env.py on the local cloud, test_node_agents.py on
played Compute Engine machines)."""

from __future__ import annotations

NAMES = (
    "SKYPILOT_NODE_RANK",
    "SKYPILOT_NODE_IPS",
    "SKYPILOT_NUM_NODES",
    "SKYPILOT_NUM_GPUS_PER_NODE",
    "SKYPILOT_TASK_ID",
    "SKYPILOT_CLUSTER_INFO",
    "SKYPILOT_SETUP_NODE_RANK",
    "SKYPILOT_SETUP_NODE_IPS",
    "CORRAL_NODE_RANK",
    "CORRAL_NUM_NODES",
)

# Each node: record what it sees, then rank 0 listens on the head's address (the first line of
# SKYPILOT_NODE_IPS) and answers one greeting; rank 1 connects there (retrying while rank 0 is
# not listening yet) and checks the answer. Plain sockets, as torch.distributed's store does.
RENDEZVOUS = r"""
import json, os, socket, sys, time
out, port = sys.argv[1], int(sys.argv[2])
env = {k: os.environ.get(k) for k in json.loads(sys.argv[3])}
rank = int(os.environ["SKYPILOT_NODE_RANK"])
head = os.environ["SKYPILOT_NODE_IPS"].splitlines()[0]
with open(f"{out}/run-{rank}.json", "w") as fh:
    json.dump(env, fh)
if rank == 0:
    server = socket.create_server((head, port))
    server.settimeout(60)
    conn, _ = server.accept()
    greeting = conn.recv(64).decode()
    conn.sendall(f"ack {greeting}".encode())
    conn.close()
    with open(f"{out}/heard.txt", "w") as fh:
        fh.write(greeting)
else:
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = socket.create_connection((head, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    conn.sendall(f"hello from {rank}".encode())
    answer = conn.recv(64).decode()
    assert answer == f"ack hello from {rank}", answer
    with open(f"{out}/answer.txt", "w") as fh:
        fh.write(answer)
"""
