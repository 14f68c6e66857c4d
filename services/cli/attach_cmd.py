"""``corral attach ID`` (a shell on a running node) and ``corral port-forward ID PORT`` (a local
port reaching 127.0.0.1:PORT on the node): both relayed through the API and the node's agent,
no SSH (docs/attach.md says why, and what it costs).

``attach`` puts the terminal in raw mode when stdin and stdout are terminals (a pty on the
node, as ``ssh -t``); otherwise it reads stdin to its end and sends it to a shell on pipes
(``echo 'nvidia-smi; exit 3' | corral attach ID``), its exit code the shell's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
import threading
from typing import TYPE_CHECKING

import typer

from corral.services.cli.api_access import api_client, complete_request_id, fail
from corral.services.cli.output import EXIT_INPUT, err

if TYPE_CHECKING:
    from corral.services.client import Client

REQUEST_ID = typer.Argument(..., help="A request id.", autocompletion=complete_request_id)
NODE = typer.Option(0, "--node", min=0, help="The node's index (0: the head).")
READ_BYTES = 64 * 1024


def register(app: typer.Typer) -> None:
    app.command("attach")(attach)
    app.command("port-forward")(port_forward)


def attach(request_id: str = REQUEST_ID, node: int = NODE) -> None:
    """An interactive shell on a running request's node, through its agent (its exit code
    is this command's). Without a terminal, stdin is the shell's script."""
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    size = shutil.get_terminal_size()
    with api_client(False) as client:
        sid = client.open_session(
            request_id, "shell", node=node, tty=tty, rows=size.lines, cols=size.columns
        )
        with _raw_terminal(tty):
            if tty:
                _send_resizes(client, sid)
            threading.Thread(target=_send_stdin, args=(client, sid), daemon=True).start()
            try:
                code = _print_output(client, sid)
            except KeyboardInterrupt:  # (no terminal: with one, Ctrl-C goes to the node)
                with contextlib.suppress(Exception):
                    client.session_write(sid, b"", eof=True)  # the shell's stdin ends
                code = 130
    raise typer.Exit(code)


@contextlib.contextmanager
def _raw_terminal(tty: bool):  # type: ignore[no-untyped-def]
    """The local terminal in raw mode (keys go to the node's shell as typed, Ctrl-C too),
    restored however the session ends."""
    if not tty:
        yield
        return
    import termios
    import tty as ttymod

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    ttymod.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _send_resizes(client: Client, sid: str) -> None:
    """On SIGWINCH, send the terminal's new size (from a thread: the handler may run in the
    middle of the main thread's own request)."""
    import signal

    def send() -> None:
        size = shutil.get_terminal_size()
        with contextlib.suppress(Exception):
            client.session_write(sid, b"", size=(size.lines, size.columns))

    signal.signal(signal.SIGWINCH, lambda *_: threading.Thread(target=send, daemon=True).start())


def _send_stdin(client: Client, sid: str) -> None:
    fd = sys.stdin.fileno()
    try:
        while data := os.read(fd, READ_BYTES):
            client.session_write(sid, data)
        client.session_write(sid, b"", eof=True)
    except Exception:
        return


def _print_output(client: Client, sid: str) -> int:
    out = sys.stdout.buffer
    while True:
        got = client.session_read(sid)
        if got.data:
            out.write(got.data)
            out.flush()
        if got.eof:
            if got.error:
                err.print(f"error: {got.error}", markup=False)
            return 1 if got.exit_code is None else got.exit_code & 0xFF


def port_forward(
    request_id: str = REQUEST_ID,
    port: int = typer.Argument(..., min=1, max=65535, help="The port on the node."),
    local_port: int | None = typer.Option(
        None, "--local-port", min=0, max=65535, help="The local port (default: PORT; 0: any)."
    ),
    node: int = NODE,
) -> None:
    """Forward a local port (on 127.0.0.1) to 127.0.0.1:PORT on a running request's node,
    each connection relayed through the API and the node's agent, until Ctrl-C."""
    with api_client(False) as client:
        view = client.status(request_id)
        if view.state != "RUNNING":
            fail(f"request {request_id} is {view.state}, not RUNNING", EXIT_INPUT, False)
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        want = port if local_port is None else local_port
        try:
            listener.bind(("127.0.0.1", want))
        except OSError as exc:
            fail(f"cannot listen on 127.0.0.1:{want}: {exc.strerror}", EXIT_INPUT, False)
        listener.listen(64)
        bound = listener.getsockname()[1]
        print(f"Forwarding 127.0.0.1:{bound} -> node {node} 127.0.0.1:{port}", flush=True)
        try:
            while True:
                conn, _ = listener.accept()
                args = (client, request_id, node, port, conn)
                threading.Thread(target=_forward_one, args=args, daemon=True).start()
        except KeyboardInterrupt:
            pass
        finally:
            listener.close()


def _forward_one(
    client: Client, request_id: str, node: int, port: int, conn: socket.socket
) -> None:
    """One local connection: a forward session of its own, bytes both ways until the node's
    side ends (the node closed its connection, or could not open it)."""
    from corral.services.client import ClientError

    with conn:
        try:
            sid = client.open_session(request_id, "forward", node=node, port=port)
        except ClientError as exc:
            err.print(f"error: {exc}", markup=False)
            return

        def send() -> None:
            try:
                while data := conn.recv(READ_BYTES):
                    client.session_write(sid, data)
                client.session_write(sid, b"", eof=True)
            except (OSError, ClientError):
                return

        threading.Thread(target=send, daemon=True).start()
        try:
            while True:
                got = client.session_read(sid)
                if got.data:
                    conn.sendall(got.data)
                if got.eof:
                    if got.error:
                        err.print(f"error: {got.error}", markup=False)
                    return
        except (OSError, ClientError) as exc:
            err.print(f"error: connection to port {port} ended: {exc}", markup=False)
