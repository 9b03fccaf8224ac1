"""Secrets in known key formats are scrubbed by their shape alone: a page, `noeta show` or
a span shows a key a tool printed even when its process never held that key."""

from __future__ import annotations

import json

import pytest

from noeta.redaction import REDACTED, Scrubber, scrub_key_formats

# Made-up keys in each format (none is, or was, a real credential).
KEYS = {
    "openai": "sk-proj-Q1w2E3r4T5y6U7i8O9p0AaSsDdFfGgHh",
    "openai-legacy": "sk-3Tz9xQkLmN0pR7sVwY2aB5cD8eF1gH4jK6",
    "anthropic": "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe-dcBA",
    "github-classic": "ghp_aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5",
    "github-oauth": "gho_aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5",
    "github-fine-grained": (
        "github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPq"
    ),
    "jwt": (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
        "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0."
        "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
    ),
    "aws-access-key-id": "AKIAIOSFODNN7EXAMPLE",
    "aws-temporary-key-id": "ASIAY34FZKBOKMUTVV7A",
}


@pytest.mark.parametrize("key", list(KEYS.values()), ids=list(KEYS))
def test_each_key_format_is_scrubbed_wherever_it_stands(key: str) -> None:
    for text in (key, f"token: {key}\n", f'{{"env": "X={key}"}}', f"Bearer {key}."):
        scrubbed = scrub_key_formats(text)
        assert key not in scrubbed
        assert REDACTED in scrubbed


@pytest.mark.parametrize("key", list(KEYS.values()), ids=list(KEYS))
def test_a_key_after_a_json_escape_is_scrubbed(key: str) -> None:
    """Spans scrub JSON-encoded content: a printed line break is the text '\\n' there."""
    encoded = json.dumps({"content": f"first line\n{key}\tand a tab"})
    assert key not in scrub_key_formats(encoded)
    assert json.loads(scrub_key_formats(encoded))["content"] == (
        f"first line\n{REDACTED}\tand a tab"
    )


def test_a_url_password_is_scrubbed_but_the_url_stays_readable() -> None:
    text = "cloning https://deploy:s3cr3t-Pa55@git.example.com/acme/app.git ..."
    assert scrub_key_formats(text) == (
        f"cloning https://deploy:{REDACTED}@git.example.com/acme/app.git ..."
    )
    redis = "REDIS_URL=redis://:hunter2hunter2@cache:6379/0"
    assert scrub_key_formats(redis) == f"REDIS_URL=redis://:{REDACTED}@cache:6379/0"


def test_the_scrubber_applies_the_formats_with_no_secret_known() -> None:
    scrub = Scrubber()  # a page's process: it holds none of the worker's keys
    assert scrub(f"found {KEYS['anthropic']} in .env") == f"found {REDACTED} in .env"


ORDINARY = [
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 (HEAD -> main)",
    "task 3f2b8c1e-9d4a-4b6f-8e2a-1c5d7f9b0a3e finished",
    'logo = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kg"',
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "pip install scikit-learn; from sklearn import svm  # sk-learn-compatible-estimators",
    "desk-lamp task-runner risk-assessment-for-the-quarterly-report-2026",
    "email me at someone@example.com or see https://example.com/a:b@c",
    "AKIA is a prefix; AKIAshort is not a key",
    "eyJ alone, or eyJhbGciOiJIUzI1NiJ9 without the rest of a token",
    "ghp_ is GitHub's prefix; so is github_pat_",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert scrub_key_formats(text) == text


def test_the_web_view_and_spans_scrub_key_formats_too() -> None:
    from noeta.observability import tracing
    from noeta.web.render import h, scrubbed

    key = KEYS["github-classic"]
    assert key not in h(f"output: {key}") and REDACTED in h(f"output: {key}")
    assert scrubbed(key) == REDACTED
    assert tracing.scrub(f"printed {key}") == f"printed {REDACTED}"


def test_values_passed_to_tools_are_scrubbed_whatever_their_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DB_PASS", "correct-horse-battery")
    monkeypatch.setenv("SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T1/B2/XXsecretXX")
    monkeypatch.setenv("REGION", "eu-west")  # 7 characters: no secret, and too common
    monkeypatch.delenv("UNSET_NAME", raising=False)
    scrub = Scrubber()
    assert scrub.add_passed(["DB_PASS", "SLACK_WEBHOOK_URL", "REGION", "UNSET_NAME"]) == ["REGION"]
    printed = "correct-horse-battery https://hooks.slack.com/services/T1/B2/XXsecretXX eu-west"
    assert scrub(printed) == f"{REDACTED} {REDACTED} eu-west"
