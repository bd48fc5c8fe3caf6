//! Devices: one per usable interface (the next commits).
