-- A paused sandbox can be hibernated: its processes and memory checkpointed
-- to disk by the runtime and its memory freed (service.Hibernate). It stays
-- in state paused (every rule of a paused sandbox holds: no exec, no
-- timeout running, resume brings it back); hibernated_at says when its
-- image was complete. It means something only while the row is paused:
-- every pause clears it, and a row that is not paused is never read as
-- hibernated.
ALTER TABLE sandboxes ADD COLUMN hibernated_at INTEGER;
