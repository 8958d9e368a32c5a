-- Tokens belong to someone (issue 31 item 4): a person signed in through the identity provider
-- creates their own tokens, and the token names them as its owner; admins' service tokens (CI,
-- workers), the first admin token and tokens from the CLI have none. Disabling a person revokes
-- the tokens they own (app::people); a person's row is never deleted by the application, and if
-- one is deleted by hand, their tokens stay (already revoked or not) without an owner.
ALTER TABLE tokens ADD COLUMN owner_person_id bigint REFERENCES people(id) ON DELETE SET NULL;
CREATE INDEX tokens_owner ON tokens (owner_person_id) WHERE owner_person_id IS NOT NULL;
