-- One archived row per dead-lettered source record. A member that crashed,
-- lost its partitions or lost its broker between producing dead letters and
-- committing their offsets used to dead-letter the redelivered records
-- again, and dlq_archive kept every copy as a row of its own (its key is
-- the DLQ record's coordinates).
--
-- redrive_count is the source record's dlq.redrive_count (0 when absent):
-- how many redrives it went through. Rows archived before this migration
-- take 0; the header belongs to the source record, so all rows of one
-- source record carry the same count, and the dedupe below (by source
-- coordinates) is not affected by it. The unique index covers rows with
-- source coordinates; a dead letter without them (written by hand, say)
-- has NULLs there, which never conflict. The DLQ topic's incarnation
-- (dlq_topic_id) is part of the key, as in the DLQ record's own key: a DLQ
-- topic deleted and recreated to purge it starts over.

-- +goose Up
ALTER TABLE dlq_archive
    ADD COLUMN redrive_count INT NOT NULL DEFAULT 0;
-- Existing copies: the first archived row of each source record stays.
DELETE FROM dlq_archive later
    USING dlq_archive earlier
    WHERE later.dlq_topic = earlier.dlq_topic
      AND later.dlq_topic_id = earlier.dlq_topic_id
      AND later.source_topic = earlier.source_topic
      AND later.source_partition = earlier.source_partition
      AND later.source_offset = earlier.source_offset
      AND later.redrive_count = earlier.redrive_count
      AND later.id > earlier.id;
CREATE UNIQUE INDEX dlq_archive_source_record_key
    ON dlq_archive (dlq_topic, dlq_topic_id, source_topic, source_partition, source_offset, redrive_count);

-- +goose Down
DROP INDEX IF EXISTS dlq_archive_source_record_key;
ALTER TABLE dlq_archive
    DROP COLUMN redrive_count;
