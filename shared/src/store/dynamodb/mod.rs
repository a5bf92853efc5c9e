//! TODO adapter
