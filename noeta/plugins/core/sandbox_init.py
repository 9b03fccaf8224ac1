"""The first program inside a command's sandbox (sandbox.py): it hands the worker a
listening socket in the command's network namespace, sets the resource limits, enters
the Landlock ruleset the worker built, and becomes the command (ADR-0077).

It runs as `python -I -S` with the standard library only and imports nothing from noeta:
every import here is paid by every Bash call. Its arguments, in order: the limits as
`name=value,...` (or `-`), the descriptor of the channel to hand the proxy's socket over
(or `-`), the descriptor of the Landlock ruleset (or `-`), then `--` and the command,
whose program is an absolute path.
"""

import os
import sys

PROXY_PORT = 3128  # inside the command's own network namespace: no other listener exists
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_PR_SET_NO_NEW_PRIVS = 38
_RULE_PATH_BENEATH = 1
_READ_FILE_AND_DIR = (1 << 2) | (1 << 3)
_NOT_RUN = 126  # the shell's code for a command that could not be run


def main(argv: list[str]) -> None:
    # The C modules: `signal` and `socket` import enum, which doubles the start-up.
    import _signal  # type: ignore[import-not-found]

    # Python ignores these; a shell and its programs expect them as the kernel sets them
    # (`yes | head` ends quietly, a file over the size limit stops its writer).
    for number in (_signal.SIGPIPE, _signal.SIGXFSZ):
        _signal.signal(number, _signal.SIG_DFL)
    limits, channel, ruleset = argv[1], argv[2], argv[3]
    command = argv[5:]
    if channel != "-":
        hand_over_proxy_socket(int(channel))
    if limits != "-":
        set_limits(limits)
    if ruleset != "-":
        enter_landlock(int(ruleset))
    os.execv(command[0], command)  # a path: a search would import after Landlock


def hand_over_proxy_socket(channel: int) -> None:
    import _socket

    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", PROXY_PORT))
    listener.listen(128)
    worker = _socket.socket(fileno=channel)
    descriptor = listener.fileno().to_bytes(4, sys.byteorder)  # one C int
    worker.sendmsg([b"listening"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, descriptor)])
    worker.close()
    listener.close()


def set_limits(limits: str) -> None:
    import resource

    for entry in limits.split(","):
        name, value = entry.split("=")
        number = int(value)
        resource.setrlimit(getattr(resource, name), (number, number))


def enter_landlock(ruleset: int) -> None:
    """The worker built the ruleset on the paths it binds here (a bind mount is the same
    inode, so its rules hold inside); only this sandbox's own /proc is new, and added."""
    import ctypes

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    libc = ctypes.CDLL(None, use_errno=True)
    proc = os.open("/proc", os.O_PATH | os.O_CLOEXEC)
    rule = PathBeneath(_READ_FILE_AND_DIR, proc)
    calls = (
        (libc.syscall, _SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0),
        (libc.prctl, _PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
        (libc.syscall, _SYS_RESTRICT_SELF, ruleset, 0),
    )
    for function, *arguments in calls:
        if function(*arguments) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    os.close(proc)
    os.close(ruleset)


if __name__ == "__main__":
    try:
        main(sys.argv)
    except Exception as error:  # whatever failed, the command must not run
        message = f"noeta: the command could not be confined, so it was not run: {error}\n"
        os.write(2, message.encode("utf-8", "replace"))
        os._exit(_NOT_RUN)
