"""Bounded parsing: every request, policy, case and feed document enters through here.

`load_document(path, limits)` reads YAML or JSON within documented `Limits`; anything hostile
(aliases that explode, deep nesting, huge integers, duplicate keys, text that is not UTF-8) is
an `InputError` listing one line per problem. See docs/reliability.md for the limits.
`open_confined(path, root)` / `unlink_confined` (`confine.py`) read and delete a path someone
else named (a workload's result, a feed folder, the evidence store) only inside its root, and
only a regular file: no `..` or link out of the root, no FIFO, device or socket.
The bottom of the domain with `devices/`: imports nothing else of `gpu_platform`.
"""

from gpu_platform.safeload.confine import (
    PathRefused,
    check_confined,
    confine,
    lstat_kind,
    open_confined,
    open_regular,
    read_confined,
    unlink_confined,
)
from gpu_platform.safeload.limits import (
    CASES_LIMITS,
    FEED_FILE_MAX_BYTES,
    FEED_JSON_LIMITS,
    INVENTORY_JSON_LIMITS,
    MAX_INT,
    POLICY_LIMITS,
    REQUEST_LIMITS,
    RESULT_LIMITS,
    Limits,
)
from gpu_platform.safeload.loader import (
    InputError,
    check_tree,
    check_utf8_file,
    decode_utf8,
    load_document,
    load_json_text,
    load_yaml_text,
    one_line,
    read_bytes,
    read_text,
    show,
    show_key,
)
from gpu_platform.safeload.paths import path_key

__all__ = [
    "CASES_LIMITS",
    "FEED_FILE_MAX_BYTES",
    "FEED_JSON_LIMITS",
    "INVENTORY_JSON_LIMITS",
    "MAX_INT",
    "POLICY_LIMITS",
    "REQUEST_LIMITS",
    "RESULT_LIMITS",
    "InputError",
    "Limits",
    "PathRefused",
    "check_confined",
    "check_tree",
    "check_utf8_file",
    "confine",
    "decode_utf8",
    "load_document",
    "load_json_text",
    "load_yaml_text",
    "lstat_kind",
    "one_line",
    "open_confined",
    "open_regular",
    "path_key",
    "read_bytes",
    "read_confined",
    "read_text",
    "show",
    "show_key",
    "unlink_confined",
]
