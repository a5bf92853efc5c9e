"""Starts a moto server on 127.0.0.1 with an ephemeral port and prints the port.

Usage: python3 moto_server.py threaded|single
`single` serves one request at a time: moto's threaded mode is not atomic for DynamoDB
conditional writes, so race tests use a single-threaded server (as DynamoDB itself would
serialise them). The server exits when its stdin closes, i.e. when the test process ends.
"""
import os
import sys
import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server


def main() -> None:
    threaded = sys.argv[1:] != ["single"]
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server("127.0.0.1", 0, app, threaded=threaded)
    print(server.server_address[1], flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
