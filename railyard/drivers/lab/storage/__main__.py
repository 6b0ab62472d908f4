"""``python -m railyard.drivers.lab.storage OP < request.json``: one S3 client operation.

object_store.s3_in_netns runs it inside a network namespace (the store's, a node's), which the
host's own processes cannot reach the storage network from.
"""

import sys

from railyard.drivers.lab.storage.object_store import _client_main

sys.exit(_client_main(sys.argv[1:]))
