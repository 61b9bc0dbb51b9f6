-- Tollgate schema. Idempotent: safe to run twice (CREATE ... IF NOT EXISTS).
-- t_ratelimite_conf is the original table, column for column, with rateLimit and cache widened to
-- DOUBLE so that a row holds every value the file's rules take (a fractional rateLimit, a cache up
-- to 60 s); Tollgate's own columns are nullable and NULL keeps the original behaviour.
-- A table made by an earlier version of this file (or the original table) is brought to this one,
-- rows kept, by sql/upgrade.sql; a column added here goes there too (MysqlE2E checks that they agree).

CREATE TABLE IF NOT EXISTS t_ratelimite_conf (
  configId       INT          NOT NULL AUTO_INCREMENT,
  channelType    VARCHAR(24)  DEFAULT NULL COMMENT 'supplier channel, e.g. IBE+',
  interfaceNo    VARCHAR(24)  DEFAULT NULL COMMENT 'supplier interface code (informational)',
  interfaceUrl   VARCHAR(128) DEFAULT NULL COMMENT 'bucket name and the URL suffix it governs',
  rateLimit      DOUBLE       DEFAULT NULL COMMENT 'permits per second, > 0 (fractions too: 0.5 is one every 2 s)',
  cache          DOUBLE       DEFAULT NULL COMMENT 'wait window in seconds, 0 to 60 (NULL: 0.5)',
  status         TINYINT(1)   NOT NULL DEFAULT 0 COMMENT '1 enabled, 0 disabled',
  lastModifyTime DATETIME     DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  -- Tollgate extensions (NULL = original behaviour)
  burst          DOUBLE       DEFAULT NULL COMMENT 'bucket size; NULL: rateLimit (one second of permits)',
  warmupSeconds  DOUBLE       DEFAULT NULL COMMENT 'Guava SmoothWarmingUp period; NULL: none',
  scope          VARCHAR(16)  DEFAULT NULL COMMENT 'NULL/interface: per URL; channel: a limit for the whole channelType',
  mode           VARCHAR(16)  DEFAULT NULL COMMENT 'NULL/enforce; shadow: decide and count, forward everything; off',
  keyBy          VARCHAR(80)  DEFAULT NULL COMMENT 'the token bucket per client: none, client_ip, client_ip_path, header:<Name>',
  maxShare       DOUBLE       DEFAULT NULL COMMENT '(0,1]: most of the wait window one client key may hold',
  adaptive       VARCHAR(8)   DEFAULT NULL COMMENT 'NULL/off; on: the rate follows upstream throttling; shadow: tracked, not applied',
  matchCase      VARCHAR(16)  DEFAULT NULL COMMENT 'NULL: limits.match.case; sensitive or insensitive: how interfaceUrl compares with a path',
  cost           INT          DEFAULT NULL COMMENT 'NULL: 1; permits one request takes from its own bucket',
  channelCost    INT          DEFAULT NULL COMMENT 'NULL: cost; permits one request takes from its channel''s bucket',
  priority       VARCHAR(1024) DEFAULT NULL COMMENT 'NULL: none; priority classes as JSON {"by","classes","default","reserve"}',
  algorithm      VARCHAR(8)   DEFAULT NULL COMMENT 'NULL/bucket: the token bucket; srtcm (RFC 2697) or trtcm (RFC 2698): a three-colour meter',
  cir            DOUBLE       DEFAULT NULL COMMENT 'meter: committed rate, permits per second',
  cbs            DOUBLE       DEFAULT NULL COMMENT 'meter: committed burst, permits',
  ebs            DOUBLE       DEFAULT NULL COMMENT 'srtcm: excess burst, permits',
  pir            DOUBLE       DEFAULT NULL COMMENT 'trtcm: peak rate, permits per second',
  pbs            DOUBLE       DEFAULT NULL COMMENT 'trtcm: peak burst, permits',
  yellow         VARCHAR(8)   DEFAULT NULL COMMENT 'meter: NULL/forward (marked X-Tollgate-Color: yellow) or wait (held for a green)',
  PRIMARY KEY (configId)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Window quotas of a rule: "limitCount requests per periodSeconds", per keyBy. A request
-- must pass its rule's token bucket (if rateLimit is set) and every enabled quota; a quota never
-- holds a request. Tables created before this one keep working: the gateway reads it if it exists.
CREATE TABLE IF NOT EXISTS t_ratelimite_quota (
  quotaId        INT          NOT NULL AUTO_INCREMENT,
  configId       INT          NOT NULL COMMENT 'the rule (t_ratelimite_conf) it belongs to',
  periodSeconds  INT          NOT NULL COMMENT 'window length, 1..86400',
  limitCount     INT          NOT NULL COMMENT 'requests admitted per window, >= 1',
  algorithm      VARCHAR(16)  NOT NULL DEFAULT 'fixed' COMMENT 'fixed | sliding',
  keyBy          VARCHAR(80)  NOT NULL DEFAULT 'none' COMMENT 'none, client_ip, client_ip_path, header:<Name>',
  status         TINYINT(1)   NOT NULL DEFAULT 1 COMMENT '1 enabled, 0 disabled',
  lastModifyTime DATETIME     DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (quotaId),
  KEY idx_quota_config (configId),
  CONSTRAINT fk_quota_config FOREIGN KEY (configId) REFERENCES t_ratelimite_conf (configId) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- One named row per switch; Tollgate uses name = 'global'.
CREATE TABLE IF NOT EXISTS t_ratelimite_switch (
  name           VARCHAR(64)  NOT NULL,
  state          TINYINT      NOT NULL DEFAULT 1 COMMENT '1 enforce, 0 off (everything forwarded), 2 shadow',
  changedBy      VARCHAR(128) NOT NULL DEFAULT 'schema',
  changedAt      DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  revertAt       DATETIME(3)  DEFAULT NULL COMMENT 'set by revert_after_s: when the state returns to revertTo',
  revertTo       TINYINT      DEFAULT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Every change of a switch, written in the same transaction as the change.
CREATE TABLE IF NOT EXISTS t_ratelimite_switch_audit (
  auditId        BIGINT       NOT NULL AUTO_INCREMENT,
  name           VARCHAR(64)  NOT NULL,
  oldState       TINYINT      DEFAULT NULL,
  newState       TINYINT      NOT NULL,
  changedBy      VARCHAR(128) NOT NULL,
  changedAt      DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (auditId),
  KEY idx_switch_audit_name (name, changedAt)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

INSERT IGNORE INTO t_ratelimite_switch (name, state, changedBy) VALUES ('global', 1, 'schema');
