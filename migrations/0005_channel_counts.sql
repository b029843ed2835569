-- 0005: an allocation may hold a run of channels (allocationMode All holds every channel from 0).
-- `count` is how many consecutive channels from `channel` the claim holds; existing rows held one.
ALTER TABLE channel_allocations ADD COLUMN count INTEGER NOT NULL DEFAULT 1;
