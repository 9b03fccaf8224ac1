"""Landlock through ctypes: which ABI the kernel offers, a ruleset built in the parent,
and the two calls a child makes between fork and exec to enter it (ADR-0048).

Everything that allocates or can fail in an ordinary way (opening paths, adding rules)
happens in the parent; the child only calls pre-bound functions with pre-built arguments.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import stat
import sys
from collections.abc import Callable
from typing import NamedTuple

# <asm-generic/unistd.h>: the same numbers on every architecture.
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# <linux/landlock.h> filesystem access rights, and the ABI that introduced each.
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
_ABI_1_RIGHTS = (1 << 13) - 1
# Rights that make sense on a file; a rule for a file may hold no others (else EINVAL).
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6


class Availability(NamedTuple):
    abi: int  # 0: Landlock cannot be used here
    reason: str  # why not, or which ABI


def handled_rights(abi: int) -> int:
    """Every filesystem right this ABI knows: a right left unhandled is silently allowed."""
    rights = _ABI_1_RIGHTS
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def handled_scopes(abi: int) -> int:
    """From ABI 6: no signals to, and no abstract UNIX sockets of, processes outside."""
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),  # left 0: TCP is not restricted
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the kernel's header
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _syscall(*args: object) -> int:
    result: int = _libc().syscall(*args)
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return result


@functools.cache
def kernel_availability() -> Availability:
    """What this kernel offers, asked once per process."""
    if not sys.platform.startswith("linux"):
        return Availability(0, f"Landlock is Linux only (this is {sys.platform})")
    try:
        abi = _syscall(
            ctypes.c_long(_SYS_CREATE_RULESET),
            None,
            ctypes.c_size_t(0),
            ctypes.c_uint32(_CREATE_RULESET_VERSION),
        )
    except OSError as error:
        return Availability(0, f"the kernel refuses Landlock ({error.strerror})")
    return Availability(abi, f"Landlock ABI {abi}")


class Ruleset:
    """A ruleset being built in the parent; `entry()` is what the child calls to enter it.

    The ruleset's descriptor is close-on-exec: the child enters it before exec and the
    command never holds it. Close the ruleset once the child is started.
    """

    def __init__(self, abi: int) -> None:
        self.handled = handled_rights(abi)
        attr = _RulesetAttr(self.handled, 0, handled_scopes(abi))
        self.fd = _syscall(
            ctypes.c_long(_SYS_CREATE_RULESET),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
            ctypes.c_uint32(0),
        )

    def allow(self, path: str, rights: int) -> bool:
        """Allow `rights` beneath `path` (a file gets only file rights); False if missing."""
        try:
            # O_PATH: a handle naming the place, usable even where reading is refused.
            handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            if not stat.S_ISDIR(os.fstat(handle).st_mode):
                rights &= FILE_RIGHTS
            rule = _PathBeneathAttr(rights & self.handled, handle)
            _syscall(
                ctypes.c_long(_SYS_ADD_RULE),
                ctypes.c_long(self.fd),
                ctypes.c_long(_RULE_PATH_BENEATH),
                ctypes.byref(rule),
                ctypes.c_uint32(0),
            )
        finally:
            os.close(handle)
        return True

    def entry(self) -> Callable[[], None]:
        """The child's side, for `preexec_fn`: no new privileges, then the ruleset.

        It runs after fork in a process that had threads, so it only calls functions
        bound here with arguments built here; it raises only when entering failed, and
        then the command is not run (the parent gets a SubprocessError).
        """
        libc = _libc()
        prctl, syscall = libc.prctl, libc.syscall
        no_new_privs = (
            ctypes.c_int(_PR_SET_NO_NEW_PRIVS),
            ctypes.c_ulong(1),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
        )
        restrict = (ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_long(self.fd), ctypes.c_uint32(0))

        def enter() -> None:
            if prctl(*no_new_privs) != 0 or syscall(*restrict) != 0:
                raise OSError("could not enter the Landlock ruleset")

        return enter

    def close(self) -> None:
        os.close(self.fd)
