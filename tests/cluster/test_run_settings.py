"""The cluster run's bad input is one clear line, and its SQL mutants can never silently
be the original: the quick parts of `make cluster` and `make cluster-mutants`."""

from __future__ import annotations

import pytest

from tests.cluster.mutants import FUNCTIONS, MUTANTS, mutated_sql
from tests.cluster.run import BadSetting, pgbouncer_option, settings


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"NOETA_CLUSTER_SEED": "abc"}, "NOETA_CLUSTER_SEED must be a number, not 'abc'"),
        ({"NOETA_CLUSTER_SECONDS": "0"}, "NOETA_CLUSTER_SECONDS must be above 0, not '0'"),
        ({"NOETA_CLUSTER_TASKS": "-3"}, "NOETA_CLUSTER_TASKS must be above 0, not '-3'"),
        ({"NOETA_CLUSTER_SECONDS": "soon"}, "NOETA_CLUSTER_SECONDS must be a number"),
    ],
)
def test_bad_settings_are_one_line_naming_the_variable(env: dict[str, str], said: str) -> None:
    with pytest.raises(BadSetting) as raised:
        settings(env)
    assert said in str(raised.value) and "\n" not in str(raised.value)


def test_settings_read_the_seed_the_size_and_the_mutant() -> None:
    env = {"NOETA_CLUSTER_SEED": "7", "NOETA_CLUSTER_TASKS": "40", "NOETA_CLUSTER_SECONDS": "90"}
    assert settings({**env, "NOETA_CLUSTER_MUTANT": "no-epoch-check"}) == (
        7,
        40,
        90.0,
        "no-epoch-check",
    )


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_each_mutant_is_its_functions_file_with_one_fragment_changed(name: str) -> None:
    mutant = MUTANTS[name]
    sql = mutated_sql(name)
    assert sql.startswith(f"CREATE OR REPLACE FUNCTION {mutant.function}(")
    assert mutant.original not in sql and mutant.mutated in sql
    current = (FUNCTIONS / f"{mutant.function}.sql").read_text(encoding="utf-8")
    assert sql == current.replace(mutant.original, mutant.mutated)


def test_the_run_takes_pgbouncer_and_refuses_any_other_argument() -> None:
    assert pgbouncer_option(["--pgbouncer"]) and not pgbouncer_option([])
    with pytest.raises(BadSetting, match="unknown argument '--pgbouncr' \\(known: --pgbouncer\\)"):
        pgbouncer_option(["--pgbouncr"])
