//! SQLSTATEs, by PostgreSQL's names for them (`src/backend/utils/errcodes.txt`): the one
//! home of every code the client, the test server and the proxy read or send.

pub const CONNECTION_FAILURE: &str = "08006";
pub const PROTOCOL_VIOLATION: &str = "08P01";
pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
pub const INVALID_PARAMETER_VALUE: &str = "22023";
pub const ACTIVE_SQL_TRANSACTION: &str = "25001";
pub const INVALID_AUTHORIZATION_SPECIFICATION: &str = "28000";
pub const INVALID_PASSWORD: &str = "28P01";
pub const INVALID_CATALOG_NAME: &str = "3D000";
pub const SYNTAX_ERROR: &str = "42601";
pub const INVALID_NAME: &str = "42602";
pub const NAME_TOO_LONG: &str = "42622";
pub const UNDEFINED_OBJECT: &str = "42704";
pub const DUPLICATE_OBJECT: &str = "42710";
pub const UNDEFINED_TABLE: &str = "42P01";
pub const TOO_MANY_CONNECTIONS: &str = "53300";
pub const DISK_FULL: &str = "53100";
pub const CONFIGURATION_LIMIT_EXCEEDED: &str = "53400";
pub const OBJECT_NOT_IN_PREREQUISITE_STATE: &str = "55000";
pub const OBJECT_IN_USE: &str = "55006";
pub const ADMIN_SHUTDOWN: &str = "57P01";
pub const CANNOT_CONNECT_NOW: &str = "57P03";
pub const UNDEFINED_FILE: &str = "58P01";
pub const INTERNAL_ERROR: &str = "XX000";
