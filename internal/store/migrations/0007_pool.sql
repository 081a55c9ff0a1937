-- A sandbox claimed from the warm pool was started before its owner was
-- known, with an agent token of its own; the claim hands the agent a fresh
-- one. The agent boots with the first again whenever its container starts,
-- so the row keeps it, sealed, to hand the current one over after a start.
-- NULL for every other sandbox: its agent boots with agent_token_sealed.
ALTER TABLE sandboxes ADD COLUMN boot_token_sealed BLOB;
