"""The blob-store state backend: each commit uploads only the store files new since the last snapshot,
plus a snapshot index; a restore downloads the whole snapshot in parallel and verifies it."""
