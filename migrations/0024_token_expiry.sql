-- Tokens created in the portal or the API (issue 30 item 7) may expire, and say who created
-- them: an expired token authenticates nothing (API, sign-in, the sessions signed in with it),
-- like a revoked one. Tokens from before, and from the CLI without --expires-in-days, never
-- expire.
ALTER TABLE tokens ADD COLUMN expires_at timestamptz;
ALTER TABLE tokens ADD COLUMN created_by text NOT NULL DEFAULT '';
