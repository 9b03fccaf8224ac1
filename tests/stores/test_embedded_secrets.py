"""The embedded server's password files are 0600 from the moment they exist, whatever
the umask: the password is the superuser's."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator, Mapping

import pytest

from noeta.backends.stores.embedded import EmbeddedPostgres, make_home


class StopAtInitdb(Exception):
    pass


class Probe(EmbeddedPostgres):
    """Records the mode of both password files when initdb would run, then stops."""

    modes: dict[str, int]

    def _run(
        self, program: str, arguments: list[str], env: Mapping[str, str] | None = None
    ) -> None:
        if program == "initdb":
            self.modes = {
                name: stat.S_IMODE((self.root / name).stat().st_mode)
                for name in ("password", "initdb-password")
            }
            raise StopAtInitdb


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_password_files_are_owner_only_under_an_open_umask(open_umask: None) -> None:
    parent = make_home("noeta-secrets-")  # a folder the server user may enter, as root too
    try:
        probe = Probe(parent / "home")
        with pytest.raises(StopAtInitdb):
            probe.start()
        assert probe.modes == {"password": 0o600, "initdb-password": 0o600}
        assert not (parent / "home" / "initdb-password").exists()
    finally:
        shutil.rmtree(parent)
