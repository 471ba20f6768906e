"""Secrets are masked the same way everywhere: printed config, free text, errors and log records."""

from __future__ import annotations

import logging

import pytest

from millstream.config.secrets import (
    REDACTED,
    SecretMaskedError,
    SecretMaskingFilter,
    is_secret_key,
    mask_secrets,
    masked_error,
)
from millstream.config.settings import Settings
from millstream.errors import MillstreamError

CONFIG = Settings(
    {
        "job.name": "j",
        "sensitive.blob.store.s3.secret.access.key": "s3-secret",
        "systems.kafka.consumer.sasl.password": "sasl-secret",
        "sensitive.short": "on",
    }
)


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("sensitive.anything", True),
        ("systems.kafka.consumer.sasl.password", True),
        ("systems.kafka.producer.ssl.key.password", True),
        ("systems.kafka.admin.sasl.oauthbearer.client.secret", True),
        ("systems.kafka.consumer.sasl.username", False),
        ("job.name", False),
    ],
)
def test_sensitive_keys_and_passed_through_credentials_are_secret_keys(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_printed_config_masks_a_passed_through_sasl_password_as_well_as_sensitive_keys() -> None:
    redacted = CONFIG.redacted()
    assert redacted["systems.kafka.consumer.sasl.password"] == REDACTED
    assert redacted["sensitive.blob.store.s3.secret.access.key"] == REDACTED
    assert "sasl-secret" not in repr(CONFIG) and redacted["job.name"] == "j"


def test_free_text_loses_every_secret_value_but_keeps_short_values_that_are_common_words() -> None:
    text = "refused s3-secret and sasl-secret, retry is on"
    assert mask_secrets(text, CONFIG) == f"refused {REDACTED} and {REDACTED}, retry is on"


def test_an_error_quoting_no_secret_is_raised_as_it_is() -> None:
    error = ValueError("bad offset 12")
    assert masked_error(error, CONFIG) is error


def test_an_error_quoting_a_secret_is_replaced_by_a_masked_millstream_error_naming_its_type() -> None:
    try:
        raise PermissionError("login refused with sasl-secret")
    except PermissionError as error:
        masked = masked_error(error, CONFIG)
    assert isinstance(masked, SecretMaskedError) and isinstance(masked, MillstreamError)
    assert str(masked) == f"PermissionError: login refused with {REDACTED}"


def test_log_records_lose_secrets_in_their_arguments_and_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("tests.secrets")
    caplog.handler.addFilter(SecretMaskingFilter(CONFIG))
    with caplog.at_level(logging.INFO, logger="tests.secrets"):
        logger.info("connecting with %s", "s3-secret")
        try:
            raise RuntimeError("token sasl-secret expired")
        except RuntimeError:
            logger.exception("client failed")
    assert "s3-secret" not in caplog.text and "sasl-secret" not in caplog.text
    assert f"connecting with {REDACTED}" in caplog.text and f"token {REDACTED} expired" in caplog.text
