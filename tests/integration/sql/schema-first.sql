-- The first shipped sql/schema.sql (commit 371da31), as it was: the oldest table sql/upgrade.sql
-- brings to the current schema (MysqlE2E.TheOldestTableUpgradesWithoutLoss).

-- Tollgate schema. Idempotent: safe to run twice (CREATE ... IF NOT EXISTS).
-- t_ratelimite_conf is the original table, column for column; Tollgate's own columns are nullable
-- and NULL keeps the original behaviour.

CREATE TABLE IF NOT EXISTS t_ratelimite_conf (
  configId       INT          NOT NULL AUTO_INCREMENT,
  channelType    VARCHAR(24)  DEFAULT NULL COMMENT 'supplier channel, e.g. IBE+',
  interfaceNo    VARCHAR(24)  DEFAULT NULL COMMENT 'supplier interface code (informational)',
  interfaceUrl   VARCHAR(128) DEFAULT NULL COMMENT 'bucket name and the URL suffix it governs',
  rateLimit      INT          DEFAULT NULL COMMENT 'permits per second, > 0',
  cache          FLOAT(3,2)   DEFAULT NULL COMMENT 'wait window in seconds (NULL: 0.5)',
  status         TINYINT(1)   NOT NULL DEFAULT 0 COMMENT '1 enabled, 0 disabled',
  lastModifyTime DATETIME     DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  -- Tollgate extensions (NULL = original behaviour)
  burst          DOUBLE       DEFAULT NULL COMMENT 'bucket size; NULL: rateLimit (one second of permits)',
  warmupSeconds  DOUBLE       DEFAULT NULL COMMENT 'Guava SmoothWarmingUp period; NULL: none',
  PRIMARY KEY (configId)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- One named row per switch; Tollgate uses name = 'global'.
CREATE TABLE IF NOT EXISTS t_ratelimite_switch (
  name           VARCHAR(64)  NOT NULL,
  state          TINYINT(1)   NOT NULL DEFAULT 1 COMMENT '1 limits enforced, 0 everything forwarded',
  changedBy      VARCHAR(128) NOT NULL DEFAULT 'schema',
  changedAt      DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Every change of a switch, written in the same transaction as the change.
CREATE TABLE IF NOT EXISTS t_ratelimite_switch_audit (
  auditId        BIGINT       NOT NULL AUTO_INCREMENT,
  name           VARCHAR(64)  NOT NULL,
  oldState       TINYINT(1)   DEFAULT NULL,
  newState       TINYINT(1)   NOT NULL,
  changedBy      VARCHAR(128) NOT NULL,
  changedAt      DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (auditId),
  KEY idx_switch_audit_name (name, changedAt)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

INSERT IGNORE INTO t_ratelimite_switch (name, state, changedBy) VALUES ('global', 1, 'schema');
