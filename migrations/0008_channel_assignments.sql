-- 0008: channel_assignments, channel isolation's record (docs/channel-isolation.md): which ComputeDomain held
-- which IMEX channel in which clique, from when to when, and where it was first asked for (the node and claim
-- of the first allocated claim; empty when a new leader adopted a number an earlier leader published). A view
-- over the controller's `channels/<clique>` streams: each ImexChannelAssigned with the first release of that
-- channel by that domain after it (none while it is held). Empty in every other log.
CREATE VIEW channel_assignments AS
SELECT json_extract(a.data, '$.clique_id')  AS clique,
       json_extract(a.data, '$.channel')    AS channel,
       json_extract(a.data, '$.domain_uid') AS domain_uid,
       json_extract(a.data, '$.namespace')  AS namespace,
       json_extract(a.data, '$.name')       AS name,
       json_extract(a.data, '$.node')       AS node,
       json_extract(a.data, '$.claim')      AS claim,
       json_extract(a.data, '$.source')     AS source,
       a.recorded_at                        AS assigned_at,
       r.recorded_at                        AS released_at,
       a.position                           AS assigned_position,
       r.position                           AS released_position
FROM events AS a
LEFT JOIN events AS r ON r.position = (
    SELECT min(x.position) FROM events AS x
    WHERE x.stream = a.stream AND x.type = 'ImexChannelReleased' AND x.position > a.position
      AND json_extract(x.data, '$.domain_uid') = json_extract(a.data, '$.domain_uid')
      AND json_extract(x.data, '$.channel') = json_extract(a.data, '$.channel'))
WHERE a.type = 'ImexChannelAssigned' AND a.stream LIKE 'channels/%';
