"""Which config values are secrets, and the one way they are masked wherever text leaves millstream.

A secret is a value under ``sensitive.`` (the documented place for one) or a value of a setting that
is a credential by its name even where it is passed through as plain config: librdkafka's
``sasl.password``, ``ssl.key.password`` and their kin under ``systems.<s>.consumer.`` / ``.producer.``
/ ``.admin.``. Printed config (:meth:`Config.redacted`), config errors, ``/status.json``, the metrics
page, container errors (which travel through Spark's logs and event logs and end in the CLI's output)
and log records all mask them with the functions here, so a new kind of secret is added in one place.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Mapping

from millstream.errors import MillstreamError

SENSITIVE_PREFIX = "sensitive."
REDACTED = "********"
PASS_THROUGH_SECRETS = (
    "sasl.password",
    "sasl.oauthbearer.client.secret",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl.keystore.password",
    "ssl.truststore.password",
)
"""Names of client settings that hold a credential wherever they appear (Kafka's, as librdkafka spells them)."""
MIN_MASKED_LENGTH = 4
"""Shorter values are not searched for in free text: masking every ``1`` or ``on`` would garble it."""


def is_secret_key(key: str) -> bool:
    """A key whose value is never shown."""
    return key.startswith(SENSITIVE_PREFIX) or key.endswith(PASS_THROUGH_SECRETS)


def secret_values(config: Mapping[str, str]) -> list[str]:
    """The values of ``config``'s secret keys long enough to search for, longest first (so that a secret
    containing another is masked whole)."""
    found = {value for key, value in config.items() if is_secret_key(key) and len(value) >= MIN_MASKED_LENGTH}
    return sorted(found, key=len, reverse=True)


def shown_value(key: str, value: str) -> str:
    """``value`` as an error message may show it: masked when ``key`` is a secret."""
    return REDACTED if is_secret_key(key) else value


def mask_secrets(text: str, config: Mapping[str, str]) -> str:
    """``text`` with every secret value of ``config`` masked: for what is served, logged or printed whole,
    where a secret could arrive inside an error message or a name."""
    for value in secret_values(config):
        if value in text:
            text = text.replace(value, REDACTED)
    return text


class SecretMaskedError(MillstreamError):
    """An error whose text quoted a secret, raised in its place with the secrets masked: the original
    would carry them into Spark's task logs and event logs, and from there into the CLI's output."""


def masked_error(error: BaseException, config: Mapping[str, str]) -> BaseException:
    """``error`` itself when neither its message nor its traceback quotes a secret, else a
    :class:`SecretMaskedError` with its message masked (log the masked traceback with :func:`masked_traceback`)."""
    if not isinstance(error, Exception):
        return error  # KeyboardInterrupt, SystemExit: control flow, not a report
    text = "".join(traceback.format_exception(error))
    if mask_secrets(text, config) == text:
        return error
    kind = "" if isinstance(error, MillstreamError) else f"{type(error).__qualname__}: "
    return SecretMaskedError(f"{kind}{mask_secrets(str(error), config)}")


def masked_traceback(error: BaseException, config: Mapping[str, str]) -> str:
    return mask_secrets("".join(traceback.format_exception(error)), config).rstrip()


class SecretMaskingFilter(logging.Filter):
    """Masks ``config``'s secrets in every record a handler emits, its arguments and traceback included."""

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__()
        self.config = dict(config)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            message = f"{message}\n{''.join(traceback.format_exception(record.exc_info[1])).rstrip()}"
        masked = mask_secrets(message, self.config)
        if masked != message:
            record.msg, record.args, record.exc_info, record.exc_text = masked, None, None, None
        return True


def mask_secrets_in_logs(config: Mapping[str, str]) -> None:
    """Install :class:`SecretMaskingFilter` on every handler of the root logger (once per handler)."""
    for handler in logging.getLogger().handlers:
        handler.filters = [f for f in handler.filters if not isinstance(f, SecretMaskingFilter)]
        handler.addFilter(SecretMaskingFilter(config))
