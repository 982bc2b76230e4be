"""The run archive, a zip file that moves finished, failed and cancelled runs between stores:

- `format`: the members, the decoded values and the field-by-field checks;
- `writer`: writing an archive (checked by the reader before it is kept);
- `reader`: reading one as a stream, in bounded memory, with every check;
- `zip_members`: the zip container under it: the directory checked, members read in bounded memory;
- `limits`: bounded, defensive reading of untrusted files and JSON (archives, and any file a user hands over);
- `consistency`: the checks across a run's fields (times in range and in order, attempts, steps);
- `destination`: where an archive may be written (a new file; never a store, a database or a device);
- `csv_cells`: the cells of every CSV the lab writes, neutralised for spreadsheets.

The store side of export and import (the rows read and inserted) is `cache.store.archive_io`.
"""
