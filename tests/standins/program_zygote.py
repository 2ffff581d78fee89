"""A warm parent for the program runs of the stand-in language host (tests/standins/language_host.py).

Each program run of the real host is a fresh `python` that imports the SDKs before the program's
first line: some 4 s of CPU on the 2-core CI machine, most of it pulumi_gcp's compute and container
modules and pulumi_kubernetes' core types, for every `preview`, `up`, `refresh` and `destroy`
(a dev lifecycle runs the program 32 times). This process imports those SDK modules once, then
forks a child per run, which runs `python_exec.py` exactly as a fresh interpreter would: same
argv, environment, working directory, stdin/stdout/stderr (handed over as file descriptors) and
`sys.path`; the program's own modules are imported in the child, never here, so every run reads
the workspace's code as it is.

What it cannot show: the seconds a user's run spends importing the SDKs, and an SDK module that
fails to import only in some environment (it is imported here once, under the test's). A child
is not a process under the CLI: it joins the host's process group (so a signal to the group
reaches it, as it reaches the real program) when both are in one session, and it ends at once when
the host that asked for it ends (a CLI killed with everything under it), as the real program's
RPCs would fail then.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import importlib
import importlib.util
import json
import os
import runpy
import select
import signal
import socket
import struct
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The folders of the program itself (docs/architecture.md), whose SDK imports are preloaded.
PROGRAM_FOLDERS = ("backends", "contracts", "domain", "infra", "k8s", "observability", "settings", "workloads")
ENV = "TPU_SLICING_PROGRAM_ZYGOTE"  # the socket's path, set for the host by tests/engine.py
_LENGTH = struct.Struct("!I")


def sdk_modules(root: Path = ROOT) -> list[str]:
    """The modules other than its own that the program imports or reaches by attribute
    (`gcp.compute.Network`), found by reading its source: `import pulumi_gcp as gcp` and
    `gcp.compute` make `pulumi_gcp.compute`."""
    files = [root / "__main__.py", *(p for folder in PROGRAM_FOLDERS for p in (root / folder).rglob("*.py"))]
    found: set[str] = set()
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for name in node.names:
                    if name.name.split(".")[0] not in PROGRAM_FOLDERS:
                        found.add(name.name)
                        aliases[name.asname or name.name] = name.name
            elif (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.level == 0
                and node.module.split(".")[0] not in PROGRAM_FOLDERS
            ):
                found.add(node.module)
                found.update(f"{node.module}.{name.name}" for name in node.names)
        for node in ast.walk(tree):
            chain = _attribute_chain(node)
            if chain and chain[0] in aliases:
                for depth in (2, 3):
                    found.add(".".join([aliases[chain[0]], *chain[1:depth]]))
    return sorted(name for name in found if _is_module(name))


def _attribute_chain(node: ast.AST) -> list[str]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) and parts else []


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _send(sock: socket.socket, message: dict[str, object], fds: Iterable[int] = ()) -> None:
    data = json.dumps(message).encode()
    socket.send_fds(sock, [_LENGTH.pack(len(data)) + data], list(fds))


def _receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, object], list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, max_fds)
    if len(data) < _LENGTH.size:
        raise ConnectionError("the zygote's peer closed the connection")
    (length,) = _LENGTH.unpack_from(data)
    body = data[_LENGTH.size :]
    while len(body) < length:
        more = sock.recv(length - len(body))
        if not more:
            raise ConnectionError("the zygote's peer closed the connection mid-message")
        body += more
    return json.loads(body), fds


# --- the host's side ---------------------------------------------------------------------------


def run(path: str, argv: list[str], env: dict[str, str]) -> int | None:
    """Run `argv` (`<venv>/bin/python <script> <args>`) as a child of the zygote at `path`, with this process's
    stdin, stdout, stderr, working directory and process group; its exit code. None when the zygote
    cannot run it (another interpreter, or no zygote listening): the caller starts it itself."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(path)
        except OSError:
            return None
        hello, _ = _receive(sock)
        # <venv>/bin/python: the venv folder resolved, not the interpreter (a link to the base one).
        if Path(str(hello["prefix"])).resolve() != Path(argv[0]).parent.parent.resolve():
            return None  # another virtualenv: the zygote's modules are not the program's
        request = {"argv": argv[1:], "env": env, "cwd": os.getcwd(), "pgid": os.getpgid(0), "sid": os.getsid(0)}
        _send(sock, request, [0, 1, 2])
        reply, _ = _receive(sock)
        return int(str(reply["code"]))


# --- the zygote's side ---------------------------------------------------------------------------


def _child(request: dict[str, object], fds: list[int], host: int) -> None:
    """In the forked child: become what `python <script> <args>` would be, run it, exit."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        if request["sid"] == os.getsid(0):
            os.setpgid(0, int(str(request["pgid"])))
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in dict(request["env"]).items()})  # type: ignore[call-overload]
        os.chdir(str(request["cwd"]))
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        threading.Thread(target=_end_with, args=(host,), daemon=True).start()
        # What `python <script> <args>` sets: argv, and the script's folder first on the path.
        sys.argv = [str(a) for a in list(request["argv"])]  # type: ignore[call-overload]
        sys.path[0] = os.path.dirname(os.path.realpath(sys.argv[0]))
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # a child must never return into the zygote's loop
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _end_with(host: int) -> None:
    """End this child when the host process that asked for it ends."""
    with contextlib.suppress(OSError):
        fd = os.pidfd_open(host)
        select.select([fd], [], [])
        os._exit(1)


def _serve_one(conn: socket.socket) -> None:
    with conn:
        request, fds = _receive(conn, max_fds=3)
        credentials = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        host, _uid, _gid = struct.unpack("3i", credentials)
        pid = os.fork()
        if pid == 0:
            conn.close()
            _child(request, fds, host)
        for fd in fds:
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        with contextlib.suppress(OSError):
            _send(conn, {"code": os.waitstatus_to_exitcode(status)})


def serve(path: str, modules: Iterable[str]) -> None:
    for name in modules:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()  # the children's collections skip what was imported here: fewer pages copied
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen(16)
        print("ready", flush=True)
        while True:
            conn, _ = server.accept()
            _send(conn, {"prefix": sys.prefix})
            threading.Thread(target=_serve_one, args=(conn,), daemon=True).start()


@contextlib.contextmanager
def running(path: Path, python: Path) -> Iterator[str]:
    """A zygote of `python` (the program's virtualenv) listening at `path`, for as long as the block."""
    import subprocess

    process = subprocess.Popen(
        [str(python), str(Path(__file__).resolve()), str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")},
    )
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the program zygote did not start (exit {process.wait()})")
        yield str(path)
    finally:
        process.terminate()
        process.wait(30)


if __name__ == "__main__":
    serve(sys.argv[1], sdk_modules())
