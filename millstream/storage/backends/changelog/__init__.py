"""The changelog state backend: every write also goes to the store's changelog partition on any system;
a restore replays it, and reverts what was written after the checkpoint (transactional state)."""
