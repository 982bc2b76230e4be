"""The run archive, a zip file that moves finished, failed and cancelled runs between stores:

- `format`: the members, the decoded values and the field-by-field checks;
- `writer`: writing an archive (checked by the reader before it is kept);
- `reader`: reading one as a stream, in bounded memory, with every check;
- `zip_members`: the zip container under it: the directory checked, members read in bounded memory;
- `limits`: bounded, defensive reading of untrusted files and JSON (archives, and any file a user hands over).

The store side of export and import (the rows read and inserted) is `cache.store.archive_io`.
"""
