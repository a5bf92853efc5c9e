"""Starts a moto server on 127.0.0.1 with an ephemeral port and prints the port.

Usage: python3 moto_server.py threaded|single
`single` serves one request at a time: moto's threaded mode is not atomic for DynamoDB
conditional writes, so race tests use a single-threaded server (as DynamoDB itself would
serialise them). The server exits when its stdin closes, i.e. when the test process ends.
"""
import os
import sys
import threading

import copy
import json
import time

import moto.dynamodb.models as dynamodb_models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.table import Table
from moto.dynamodb.exceptions import DynamodbException
from moto.dynamodb.responses import DynamoHandler
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server


class _TablesUncopied:
    """moto backs up every table a transaction touches with a deep copy, to roll back: a
    TransactWriteItems costs the size of the table (a crawl of 1,000 hosts took minutes, and
    gigabytes). Tables are not copied here; the transaction's own items are (below)."""

    @staticmethod
    def deepcopy(value, memo=None):
        return value if isinstance(value, Table) else copy.deepcopy(value, memo)


dynamodb_models.copy = _TablesUncopied
_transact_write_items = DynamoDBBackend.transact_write_items


def _key_of(backend, op):
    table = backend.tables.get(op.get("TableName"))
    if table is None:
        return None
    if "Key" in op:
        return op["Key"]
    attrs = op.get("Item", {})
    names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
    return {name: attrs[name] for name in names if name in attrs}


def _transact_with_item_backups(self, transact_items):
    """The same transaction, rolled back by restoring the items it touches as they were."""
    saved = []
    for entry in transact_items:
        _, op = next(iter(entry.items()))
        key = _key_of(self, op)
        if key is not None:
            item = self.get_item(op["TableName"], key)
            saved.append((op["TableName"], key, item and item.to_json()["Attributes"]))
    try:
        return _transact_write_items(self, transact_items)
    except Exception:
        for table_name, key, attrs in reversed(saved):
            if attrs is None:
                self.delete_item(table_name, key)
            else:
                self.put_item(table_name, copy.deepcopy(attrs))
        raise


DynamoDBBackend.transact_write_items = _transact_with_item_backups

_handler_transact_write_items = DynamoHandler.transact_write_items
_tokens = {}
_TOKEN_WINDOW_S = 600


def _transact_idempotent(self):
    """DynamoDB's ClientRequestToken, which moto ignores: a TransactWriteItems repeated with the
    token of one that succeeded less than ten minutes before succeeds again without writing; the
    same token with other items is refused (IdempotentParameterMismatchException), as AWS
    documents. trawl's additive writes rely on it (trawl_domain::request)."""
    token = self.body.get("ClientRequestToken")
    if token is None:
        return _handler_transact_write_items(self)
    items = json.dumps(self.body.get("TransactItems"), sort_keys=True)
    now = time.monotonic()
    seen = _tokens.get(token)
    if seen is not None and now - seen[1] < _TOKEN_WINDOW_S:
        if seen[0] != items:
            raise DynamodbException(
                "com.amazonaws.dynamodb.v20120810#IdempotentParameterMismatchException",
                "the token was used with other parameters",
            )
        return seen[2]
    response = _handler_transact_write_items(self)
    _tokens[token] = (items, now, response)
    return response


DynamoHandler.transact_write_items = _transact_idempotent


def main() -> None:
    threaded = sys.argv[1:] != ["single"]
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server("127.0.0.1", 0, app, threaded=threaded)
    print(server.server_address[1], flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
