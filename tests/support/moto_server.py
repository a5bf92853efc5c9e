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
import inspect
import json
import time

import moto.backends as moto_backends
import moto.dynamodb.models as dynamodb_models
import moto.sqs.exceptions as sqs_exceptions
import moto.sqs.models as sqs_models
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


# moto answers every Query by sorting every item of the table, then filtering it: a crawl of
# thousands of hosts on moto is quadratic (1,000 hosts took minutes). For a table keyed by its
# hash key alone (trawl's), the items of one key are found here by a lookup instead: the table's
# own items for a base-table Query, and a map kept by every write for each index's hash key.
# moto's own query then runs over those candidates (its conditions, sort, paging unchanged).
_lock = threading.RLock()
_candidates = threading.local()
_all_items = Table.all_items


def _all_items_or_candidates(self):
    items = getattr(_candidates, "items", None)
    return _all_items(self) if items is None else items


def _index_attrs(table):
    """Each index's hash attribute (indexes keyed by one), for a table keyed by a hash key alone."""
    if table.range_key_attr:
        return {}
    attrs = {}
    for index in table.all_indexes():
        hashes = [k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH"]
        if len(hashes) == 1:
            attrs[index.name] = hashes[0]
    return attrs


def _maps(table):
    """The table's maps: index name -> hash value -> keys of its items (built at first use)."""
    maps = getattr(table, "_trawl_maps", None)
    if maps is None:
        maps = {name: {} for name in _index_attrs(table)}
        table._trawl_maps = maps
        for item in _all_items(table):
            _file(table, item, _index_values(table, item), add=True)
    return maps


def _index_values(table, item):
    """The item's value of each index's hash attribute, copied: an update changes it in place."""
    if item is None:
        return {}
    values = {}
    for name, attr in _index_attrs(table).items():
        value = item.attrs.get(attr)
        values[name] = None if value is None else dynamodb_models.DynamoType(value.to_json())
    return values


def _file(table, item_key, values, add):
    key = item_key.hash_key if hasattr(item_key, "hash_key") else item_key
    for name, value in values.items():
        if value is None:
            continue
        bucket = table._trawl_maps.setdefault(name, {}).setdefault(value, set())
        if add:
            bucket.add(key)
        else:
            bucket.discard(key)


def _refile(table, hash_value, before, write):
    """Runs `write`, then files the item at `hash_value` under its index values after it."""
    with _lock:
        _maps(table)
        result = write()
        after = table.items.get(hash_value)
        _file(table, hash_value, before, add=False)
        _file(table, hash_value, _index_values(table, after), add=True)
        return result


_table_put_item = Table.put_item
_table_delete_item = Table.delete_item
_backend_update_item = DynamoDBBackend.update_item
_table_query = Table.query


def _put_item(self, item_attrs, *args, **kwargs):
    if self.range_key_attr or self.hash_key_attr not in item_attrs:
        return _table_put_item(self, item_attrs, *args, **kwargs)
    hash_value = dynamodb_models.DynamoType(item_attrs[self.hash_key_attr])
    before = _index_values(self, self.items.get(hash_value))
    return _refile(
        self, hash_value, before, lambda: _table_put_item(self, item_attrs, *args, **kwargs)
    )


def _delete_item(self, hash_key, range_key):
    if self.range_key_attr:
        return _table_delete_item(self, hash_key, range_key)
    before = _index_values(self, self.items.get(hash_key))
    return _refile(self, hash_key, before, lambda: _table_delete_item(self, hash_key, range_key))


def _update_item(self, table_name, key, *args, **kwargs):
    table = self.get_table(table_name)
    if table.range_key_attr or table.hash_key_attr not in key:
        return _backend_update_item(self, table_name, key, *args, **kwargs)
    hash_value = dynamodb_models.DynamoType(key[table.hash_key_attr])
    before = _index_values(table, table.items.get(hash_value))
    return _refile(
        table, hash_value, before, lambda: _backend_update_item(self, table_name, key, *args, **kwargs)
    )


_query_parameters = inspect.signature(_table_query)


def _query(self, hash_key, *args, **kwargs):
    arguments = _query_parameters.bind(self, hash_key, *args, **kwargs).arguments
    index_name = arguments.get("index_name")
    conditions = arguments.get("hash_key_conditions") or []
    with _lock:
        if self.range_key_attr:
            items = None
        elif index_name is None:
            item = self.items.get(hash_key) if hash_key is not None else None
            items = [] if item is None else [item]
        elif len(conditions) == 1 and _index_attrs(self).get(index_name) == conditions[0][0]:
            keys = _maps(self).get(index_name, {}).get(conditions[0][1], ())
            items = [self.items[k] for k in keys if k in self.items]
        else:
            items = None
        _candidates.items = items
        try:
            return _table_query(self, hash_key, *args, **kwargs)
        finally:
            _candidates.items = None


Table.all_items = _all_items_or_candidates
Table.put_item = _put_item
Table.delete_item = _delete_item
DynamoDBBackend.update_item = _update_item
Table.query = _query


# moto's SQS reads the clock twice per message, through datetime, to tell whether it is visible,
# and every SendMessage computes the queue's attributes, its message counts among them: sending
# to a queue holding n messages cost 3n clock reads, so a crawl seeding 5,000 hosts spent most of
# its seeding in the queues' server. One clock read per pass here, the same rules.
def _visible_now(now, message):
    return now > message.visible_at and not now < message.delayed_until


def _messages(self):
    now = sqs_models.unix_time_millis()
    return [m for m in self._messages if _visible_now(now, m)]


def _delayed(self):
    now = sqs_models.unix_time_millis()
    return len([m for m in self._messages if now < m.delayed_until])


def _not_visible(self):
    now = sqs_models.unix_time_millis()
    return len([m for m in self._messages if not now > m.visible_at])


def _delete_message(self, receipt_handle):
    """moto's, in one pass over the messages instead of two, each building lists."""
    if receipt_handle in self.deleted_messages:
        return
    for i, message in enumerate(self._messages):
        if message.receipt_handle == receipt_handle or receipt_handle in message._old_receipt_handles:
            self.pending_messages.discard(message)
            self.deleted_messages.update(message.all_receipt_handles)
            # A new list, as moto's: a receive in another thread may be reading the old one.
            self._messages = self._messages[:i] + self._messages[i + 1 :]
            return
    raise sqs_exceptions.ReceiptHandleIsInvalid()


sqs_models.Queue.messages = property(_messages)
sqs_models.Queue.approximate_number_of_messages_delayed = property(_delayed)
sqs_models.Queue.approximate_number_of_messages_not_visible = property(_not_visible)
sqs_models.Queue.delete_message = _delete_message


# moto lists its package directory (a stat of every entry) on every request to find the service
# a Host header names: about 5% of a DynamoDB request's time. The list does not change.
_moto_modules = tuple(moto_backends.list_of_moto_modules())
moto_backends.list_of_moto_modules = lambda: _moto_modules


def main() -> None:
    threaded = sys.argv[1:] != ["single"]
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server("127.0.0.1", 0, app, threaded=threaded)
    print(server.server_address[1], flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
