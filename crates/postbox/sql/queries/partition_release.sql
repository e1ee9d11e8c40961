-- Give back partitions $2 of schema $1 (called between batches, never inside one).
SELECT count(*)
  FROM unnest($2::int[]) AS p
 WHERE pg_advisory_unlock(hashtext('postbox.partition.' || $1), p)
