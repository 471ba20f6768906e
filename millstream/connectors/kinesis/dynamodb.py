"""Shard leases and checkpoints in a DynamoDB table instead of the job's metadata store.

``consumer.lease.store=dynamodb``: for jobs whose operators want the leases where KCL applications keep
theirs, readable with AWS tools, or independent of the job's metadata store. The table (created on
demand, on-demand capacity, unless ``consumer.dynamodb.create.table=false``) has the partition key
``namespace`` and the sort key ``key`` (both strings) and the record in the binary attribute ``value``:
the same records as in the metadata store (``leases``), so the lease protocol is unchanged.

It implements the part of the ``MetadataStore`` contract the lease table uses. ``compare_and_put`` is a
conditional ``PutItem`` (``attribute_not_exists`` or ``value = :expected``) — atomic in DynamoDB — or,
when the expectation names other records too, a ``TransactWriteItems`` with condition checks. Reads are
strongly consistent, so a worker always compares against the latest write.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from millstream.connectors.kinesis.errors import KinesisSystemError
from millstream.connectors.kinesis.throttling import Backoff, KinesisMetrics, error_code, is_throttling, is_transient
from millstream.contracts.metadata import MetadataStore

ATTEMPTS = 8


class DynamoDBLeaseStore(MetadataStore):
    """A DynamoDB table behind the ``MetadataStore`` methods the Kinesis lease table uses; thread-safe."""

    def __init__(
        self,
        system: str,
        client_factory: Callable[[], Any],
        table: str,
        *,
        create_table: bool = True,
        metrics: KinesisMetrics | None = None,
    ) -> None:
        self.system = system
        self.table = table
        self.create_table = create_table
        self.metrics = metrics or KinesisMetrics()
        self._client_factory = client_factory
        self._client: Any = None
        self._ready = False

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def _call(self, operation: str, **arguments: Any) -> Any:
        """One DynamoDB call, retried with backoff while throttled or briefly unavailable."""
        from botocore.exceptions import BotoCoreError, ClientError

        backoff = Backoff(0.05, 2.0)
        method = getattr(self.client, operation)
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return method(**arguments)
            except ClientError as error:
                if is_throttling(error):
                    self.metrics.throttled(f"DynamoDB.{operation}")
                elif not is_transient(error) or attempt == ATTEMPTS:
                    raise
            except BotoCoreError as error:
                if attempt == ATTEMPTS:
                    raise KinesisSystemError(
                        self.system, f"DynamoDB lease table '{self.table}': {operation} failed: {error}"
                    ) from None
            time.sleep(backoff.next_delay())
        raise KinesisSystemError(self.system, f"DynamoDB lease table '{self.table}': {operation} kept being throttled")

    def init(self) -> None:
        """Check the table exists (creating it when allowed) and wait until it is ACTIVE."""
        if self._ready:
            return
        from botocore.exceptions import ClientError

        try:
            status = self._call("describe_table", TableName=self.table)["Table"]["TableStatus"]
        except ClientError as error:
            if error_code(error) != "ResourceNotFoundException":
                raise self._error("cannot describe the table", error) from None
            if not self.create_table:
                raise KinesisSystemError(
                    self.system,
                    f"DynamoDB lease table '{self.table}' does not exist (create it, or set "
                    f"systems.{self.system}.consumer.dynamodb.create.table=true)",
                ) from None
            status = self._create()
        deadline = time.monotonic() + 120
        while status != "ACTIVE":
            if time.monotonic() > deadline:
                raise KinesisSystemError(self.system, f"DynamoDB lease table '{self.table}' is not ACTIVE ({status})")
            time.sleep(0.2)
            status = self._call("describe_table", TableName=self.table)["Table"]["TableStatus"]
        self._ready = True

    def _create(self) -> str:
        from botocore.exceptions import ClientError

        try:
            response = self._call(
                "create_table",
                TableName=self.table,
                AttributeDefinitions=[
                    {"AttributeName": "namespace", "AttributeType": "S"},
                    {"AttributeName": "key", "AttributeType": "S"},
                ],
                KeySchema=[
                    {"AttributeName": "namespace", "KeyType": "HASH"},
                    {"AttributeName": "key", "KeyType": "RANGE"},
                ],
                BillingMode="PAY_PER_REQUEST",
            )
        except ClientError as error:
            if error_code(error) == "ResourceInUseException":  # another container created it meanwhile
                return "CREATING"
            raise self._error("cannot create the table", error) from None
        return str(response["TableDescription"]["TableStatus"])

    def get(self, namespace: str, key: str) -> bytes | None:
        item = self._call("get_item", TableName=self.table, Key=_key(namespace, key), ConsistentRead=True).get("Item")
        return None if item is None else bytes(item["value"]["B"])

    def put(self, namespace: str, key: str, value: bytes) -> None:
        self._call("put_item", TableName=self.table, Item={**_key(namespace, key), "value": {"B": bytes(value)}})

    def delete(self, namespace: str, key: str) -> None:
        self._call("delete_item", TableName=self.table, Key=_key(namespace, key))

    def all(self, namespace: str) -> dict[str, bytes]:
        records: dict[str, bytes] = {}
        arguments: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "#n = :n",
            "ExpressionAttributeNames": {"#n": "namespace"},
            "ExpressionAttributeValues": {":n": {"S": namespace}},
            "ConsistentRead": True,
        }
        while True:
            response = self._call("query", **arguments)
            for item in response.get("Items", []):
                records[item["key"]["S"]] = bytes(item["value"]["B"])
            last = response.get("LastEvaluatedKey")
            if not last:
                return dict(sorted(records.items()))
            arguments["ExclusiveStartKey"] = last

    def compare_and_put(
        self,
        namespace: str,
        key: str,
        value: bytes,
        expected: Mapping[tuple[str, str], bytes | None],
    ) -> bool:
        from botocore.exceptions import ClientError

        item = {**_key(namespace, key), "value": {"B": bytes(value)}}
        others = {where: wanted for where, wanted in expected.items() if where != (namespace, key)}
        condition = _condition(expected[(namespace, key)]) if (namespace, key) in expected else None
        try:
            if not others:
                put: dict[str, Any] = {"TableName": self.table, "Item": item}
                if condition is not None:
                    put.update(condition)
                self._call("put_item", **put)
            else:
                actions: list[dict[str, Any]] = []
                for (other_namespace, other_key), wanted in others.items():
                    check = {"TableName": self.table, "Key": _key(other_namespace, other_key), **_condition(wanted)}
                    actions.append({"ConditionCheck": check})
                put_action: dict[str, Any] = {"TableName": self.table, "Item": item}
                if condition is not None:
                    put_action.update(condition)
                actions.append({"Put": put_action})
                self._call("transact_write_items", TransactItems=actions)
        except ClientError as error:
            if error_code(error) in ("ConditionalCheckFailedException", "TransactionCanceledException"):
                return False
            raise self._error(f"cannot write '{key}'", error) from None
        return True

    def close(self) -> None:
        pass

    def _error(self, what: str, error: Exception) -> KinesisSystemError:
        return KinesisSystemError(
            self.system,
            f"DynamoDB lease table '{self.table}': {what}: {error_code(error) or type(error).__name__}: {error}",
        )


def _key(namespace: str, key: str) -> dict[str, Any]:
    return {"namespace": {"S": namespace}, "key": {"S": key}}


def _condition(wanted: bytes | None) -> dict[str, Any]:
    if wanted is None:
        return {"ConditionExpression": "attribute_not_exists(#k)", "ExpressionAttributeNames": {"#k": "key"}}
    return {
        "ConditionExpression": "#v = :v",
        "ExpressionAttributeNames": {"#v": "value"},
        "ExpressionAttributeValues": {":v": {"B": bytes(wanted)}},
    }
