-- A group is deleted only by reclassification, when it has no report and no fix left. A fix
-- recorded at that moment must stop the delete (foreign-key error, which the reclassification
-- expects), not vanish with the group by cascade.
ALTER TABLE fixes DROP CONSTRAINT fixes_group_id_fkey;
ALTER TABLE fixes ADD CONSTRAINT fixes_group_id_fkey FOREIGN KEY (group_id) REFERENCES groups (id);
