-- The supplier's interfaces, one row each (load after sql/schema.sql, or sql/upgrade.sql for an
-- existing table): 5 calls/s for shopping, 2/s for booking, each request waiting up to its
-- `cache` seconds for a permit. Edit a row and every gateway applies it within a second.
INSERT INTO t_ratelimite_conf (configId, channelType, interfaceNo, interfaceUrl, rateLimit, cache, status)
VALUES (1, 'NDS', 'S01', '/shopping/search', 5, 0.5, 1),
       (2, 'NDS', 'B01', '/booking/create', 2, 1.0, 1);
