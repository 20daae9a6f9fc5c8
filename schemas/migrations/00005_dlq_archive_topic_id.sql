-- A DLQ topic that is deleted and recreated (to purge it) starts its offsets
-- at 0 again, so (dlq_topic, dlq_partition, dlq_offset) no longer identifies
-- a DLQ record: the new records collided with archived rows and were
-- dropped. dlq_topic_id is the Kafka topic ID of the DLQ topic's
-- incarnation the record was read from, and joins the unique key.
--
-- Rows archived before this migration (and rows from brokers that do not
-- report topic IDs) keep the zero UUID, Kafka's "no topic ID". The zero
-- UUID rather than NULL keeps them unique among themselves on any
-- PostgreSQL version; the archiver matches a zero-ID row by content before
-- it inserts the same record again under its real ID.

-- +goose Up
ALTER TABLE dlq_archive
    ADD COLUMN dlq_topic_id UUID NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';
ALTER TABLE dlq_archive
    ADD CONSTRAINT dlq_archive_dlq_record_key UNIQUE (dlq_topic, dlq_partition, dlq_offset, dlq_topic_id);
ALTER TABLE dlq_archive
    DROP CONSTRAINT dlq_archive_dlq_topic_dlq_partition_dlq_offset_key;

-- +goose Down
-- The old key cannot hold two incarnations' records at the same
-- coordinates: the earliest archived row of each is kept.
DELETE FROM dlq_archive later
    USING dlq_archive earlier
    WHERE later.dlq_topic = earlier.dlq_topic
      AND later.dlq_partition = earlier.dlq_partition
      AND later.dlq_offset = earlier.dlq_offset
      AND later.id > earlier.id;
ALTER TABLE dlq_archive
    ADD CONSTRAINT dlq_archive_dlq_topic_dlq_partition_dlq_offset_key UNIQUE (dlq_topic, dlq_partition, dlq_offset);
ALTER TABLE dlq_archive
    DROP CONSTRAINT dlq_archive_dlq_record_key;
ALTER TABLE dlq_archive
    DROP COLUMN dlq_topic_id;
