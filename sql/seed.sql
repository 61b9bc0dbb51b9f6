-- Demo rows matching conf/gateway.json. Idempotent: re-running restores these values.
INSERT INTO t_ratelimite_conf (configId, channelType, interfaceNo, interfaceUrl, rateLimit, cache, status)
VALUES (1, 'IBE+', 'S01', '/shopping/search', 5, 0.50, 1),
       (2, 'IBE+', 'P01', '/pricing', 10, 0.20, 1),
       (3, 'IBE+', 'B01', '/booking', 2, 1.00, 1),
       (4, 'IBE+', 'L01', '/login', NULL, NULL, 1)
ON DUPLICATE KEY UPDATE channelType = VALUES(channelType), interfaceNo = VALUES(interfaceNo),
  interfaceUrl = VALUES(interfaceUrl), rateLimit = VALUES(rateLimit), cache = VALUES(cache),
  status = VALUES(status);

-- The original per-endpoint example: per client IP and path, 2 per second and 5 per minute.
INSERT INTO t_ratelimite_quota (quotaId, configId, periodSeconds, limitCount, algorithm, keyBy, status)
VALUES (1, 4, 1, 2, 'fixed', 'client_ip_path', 1),
       (2, 4, 60, 5, 'fixed', 'client_ip_path', 1)
ON DUPLICATE KEY UPDATE configId = VALUES(configId), periodSeconds = VALUES(periodSeconds),
  limitCount = VALUES(limitCount), algorithm = VALUES(algorithm), keyBy = VALUES(keyBy), status = VALUES(status);
