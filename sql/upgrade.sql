-- Brings the tables of any earlier Tollgate (or the original t_ratelimite_conf) to sql/schema.sql,
-- keeping every row:   mysql tollgate < sql/upgrade.sql
-- Safe to run any number of times: each step looks at information_schema and changes only what is
-- not yet as sql/schema.sql has it, so a table whose columns were added by hand, some or all, is
-- upgraded too. It uses no ADD COLUMN IF NOT EXISTS (MariaDB only), no procedure and no DELIMITER:
-- the same file runs on MariaDB 10.x and MySQL 8.0. ALTER TABLE commits as it goes; a run cut
-- short is finished by running the file again. A new database takes sql/schema.sql instead.
-- docs/rules-and-mysql.md#upgrading-an-existing-table says what each step keeps.

SET SESSION group_concat_max_len = 65536;  -- the column lists below are longer than the 1024 default

-- 1. The columns Tollgate added to t_ratelimite_conf, in the order they came; the missing ones are
--    added in one ALTER TABLE, NULL in every existing row (NULL keeps the original behaviour).
SELECT GROUP_CONCAT(CONCAT('ADD COLUMN ', w.name, ' ', w.def) ORDER BY w.pos SEPARATOR ', ') INTO @adds
FROM (
  SELECT 1 AS pos, 'burst' AS name, 'DOUBLE DEFAULT NULL COMMENT ''bucket size; NULL: rateLimit (one second of permits)''' AS def
  UNION ALL SELECT 2, 'warmupSeconds', 'DOUBLE DEFAULT NULL COMMENT ''Guava SmoothWarmingUp period; NULL: none'''
  UNION ALL SELECT 3, 'scope', 'VARCHAR(16) DEFAULT NULL COMMENT ''NULL/interface: per URL; channel: a limit for the whole channelType'''
  UNION ALL SELECT 4, 'mode', 'VARCHAR(16) DEFAULT NULL COMMENT ''NULL/enforce; shadow: decide and count, forward everything; off'''
  UNION ALL SELECT 5, 'keyBy', 'VARCHAR(80) DEFAULT NULL COMMENT ''the token bucket per client: none, client_ip, client_ip_path, header:<Name>'''
  UNION ALL SELECT 6, 'maxShare', 'DOUBLE DEFAULT NULL COMMENT ''(0,1]: most of the wait window one client key may hold'''
  UNION ALL SELECT 7, 'adaptive', 'VARCHAR(8) DEFAULT NULL COMMENT ''NULL/off; on: the rate follows upstream throttling; shadow: tracked, not applied'''
  UNION ALL SELECT 8, 'matchCase', 'VARCHAR(16) DEFAULT NULL COMMENT ''NULL: limits.match.case; sensitive or insensitive: how interfaceUrl compares with a path'''
  UNION ALL SELECT 9, 'cost', 'INT DEFAULT NULL COMMENT ''NULL: 1; permits one request takes from its own bucket'''
  UNION ALL SELECT 10, 'channelCost', 'INT DEFAULT NULL COMMENT ''NULL: cost; permits one request takes from its channel''''s bucket'''
  UNION ALL SELECT 11, 'priority', 'VARCHAR(1024) DEFAULT NULL COMMENT ''NULL: none; priority classes as JSON {"by","classes","default","reserve"}'''
  UNION ALL SELECT 12, 'algorithm', 'VARCHAR(8) DEFAULT NULL COMMENT ''NULL/bucket: the token bucket; srtcm (RFC 2697) or trtcm (RFC 2698): a three-colour meter'''
  UNION ALL SELECT 13, 'cir', 'DOUBLE DEFAULT NULL COMMENT ''meter: committed rate, permits per second'''
  UNION ALL SELECT 14, 'cbs', 'DOUBLE DEFAULT NULL COMMENT ''meter: committed burst, permits'''
  UNION ALL SELECT 15, 'ebs', 'DOUBLE DEFAULT NULL COMMENT ''srtcm: excess burst, permits'''
  UNION ALL SELECT 16, 'pir', 'DOUBLE DEFAULT NULL COMMENT ''trtcm: peak rate, permits per second'''
  UNION ALL SELECT 17, 'pbs', 'DOUBLE DEFAULT NULL COMMENT ''trtcm: peak burst, permits'''
  UNION ALL SELECT 18, 'yellow', 'VARCHAR(8) DEFAULT NULL COMMENT ''meter: NULL/forward (marked X-Tollgate-Color: yellow) or wait (held for a green)'''
) AS w
WHERE NOT EXISTS (SELECT 1 FROM information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = DATABASE()
                  AND c.TABLE_NAME = 't_ratelimite_conf' AND c.COLUMN_NAME = w.name);
SET @ddl = IF(@adds IS NULL, 'DO 0', CONCAT('ALTER TABLE t_ratelimite_conf ', @adds));
PREPARE step FROM @ddl; EXECUTE step; DEALLOCATE PREPARE step;

-- 2. rateLimit INT and cache FLOAT(3,2) widened to DOUBLE, so that a row holds what the file takes
--    (a fractional rateLimit, a cache up to 60 s). INT to DOUBLE is exact. A FLOAT holds 0.2 as
--    0.200000003, so it goes through DECIMAL with its own decimals first: 0.2 stays 0.2.
SELECT IF(COUNT(*) = 0, 'DO 0',
          'ALTER TABLE t_ratelimite_conf MODIFY COLUMN rateLimit DOUBLE DEFAULT NULL COMMENT ''permits per second, > 0 (fractions too: 0.5 is one every 2 s)''')
  INTO @ddl FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 't_ratelimite_conf'
  AND COLUMN_NAME = 'rateLimit' AND DATA_TYPE <> 'double';
PREPARE step FROM @ddl; EXECUTE step; DEALLOCATE PREPARE step;
SELECT IF(COUNT(*) = 0, 'DO 0',
          CONCAT('ALTER TABLE t_ratelimite_conf MODIFY COLUMN cache DECIMAL(12,', MAX(IFNULL(NUMERIC_SCALE, 6)), ') DEFAULT NULL'))
  INTO @ddl FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 't_ratelimite_conf'
  AND COLUMN_NAME = 'cache' AND DATA_TYPE = 'float';
PREPARE step FROM @ddl; EXECUTE step; DEALLOCATE PREPARE step;
SELECT IF(COUNT(*) = 0, 'DO 0',
          'ALTER TABLE t_ratelimite_conf MODIFY COLUMN cache DOUBLE DEFAULT NULL COMMENT ''wait window in seconds, 0 to 60 (NULL: 0.5)''')
  INTO @ddl FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 't_ratelimite_conf'
  AND COLUMN_NAME = 'cache' AND DATA_TYPE <> 'double';
PREPARE step FROM @ddl; EXECUTE step; DEALLOCATE PREPARE step;

-- 3. The quota table (new tables as sql/schema.sql makes them; existing ones untouched).
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

CREATE TABLE IF NOT EXISTS t_ratelimite_switch (
  name           VARCHAR(64)  NOT NULL,
  state          TINYINT      NOT NULL DEFAULT 1 COMMENT '1 enforce, 0 off (everything forwarded), 2 shadow',
  changedBy      VARCHAR(128) NOT NULL DEFAULT 'schema',
  changedAt      DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  revertAt       DATETIME(3)  DEFAULT NULL COMMENT 'set by revert_after_s: when the state returns to revertTo',
  revertTo       TINYINT      DEFAULT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

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

-- 4. The switch's third state (2, shadow) and its timed revert. The state columns were TINYINT(1),
--    which some clients read as a boolean; the gateway reads them as 0, 1 or 2 either way.
SELECT GROUP_CONCAT(CONCAT('ADD COLUMN ', w.name, ' ', w.def) ORDER BY w.pos SEPARATOR ', ') INTO @adds
FROM (
  SELECT 1 AS pos, 'revertAt' AS name, 'DATETIME(3) DEFAULT NULL COMMENT ''set by revert_after_s: when the state returns to revertTo''' AS def
  UNION ALL SELECT 2, 'revertTo', 'TINYINT DEFAULT NULL'
) AS w
WHERE NOT EXISTS (SELECT 1 FROM information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = DATABASE()
                  AND c.TABLE_NAME = 't_ratelimite_switch' AND c.COLUMN_NAME = w.name);
SET @ddl = IF(@adds IS NULL, 'DO 0', CONCAT('ALTER TABLE t_ratelimite_switch ', @adds));
PREPARE step FROM @ddl; EXECUTE step; DEALLOCATE PREPARE step;
SELECT IF(COUNT(*) = 0, 'DO 0',
          'ALTER TABLE t_ratelimite_switch MODIFY COLUMN state TINYINT NOT NULL DEFAULT 1 COMMENT ''1 enforce, 0 off (everything forwarded), 2 shadow''')
  INTO @ddl FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 't_ratelimite_switch'
  AND COLUMN_NAME = 'state' AND COLUMN_TYPE = 'tinyint(1)';
PREPARE step FROM @ddl; EXECUTE step; DEALLOCATE PREPARE step;
SELECT IF(COUNT(*) = 0, 'DO 0',
          'ALTER TABLE t_ratelimite_switch_audit MODIFY COLUMN oldState TINYINT DEFAULT NULL, MODIFY COLUMN newState TINYINT NOT NULL')
  INTO @ddl FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 't_ratelimite_switch_audit'
  AND COLUMN_NAME IN ('oldState', 'newState') AND COLUMN_TYPE = 'tinyint(1)';
PREPARE step FROM @ddl; EXECUTE step; DEALLOCATE PREPARE step;

INSERT IGNORE INTO t_ratelimite_switch (name, state, changedBy) VALUES ('global', 1, 'schema');
