//! Policy agent SDK.
