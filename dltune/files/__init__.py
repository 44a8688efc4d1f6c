"""Safe file handling, in one home: bounded, regular-file-only reads of JSON and text (safeio), and
work relative to open directory descriptors that never follows a link another user made, with the
one atomic writer (dirfd.write_atomically)."""
