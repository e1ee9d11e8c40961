-- `--notify logical` needs wal_level = logical.
SELECT current_setting('wal_level')
