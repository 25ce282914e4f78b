"""The evidence ladder's ledger and the gate that checks claimed statuses against it."""
