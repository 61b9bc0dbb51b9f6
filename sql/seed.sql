-- Demo rows matching conf/gateway.json. Idempotent: re-running restores these values.
INSERT INTO t_ratelimite_conf (configId, channelType, interfaceNo, interfaceUrl, rateLimit, cache, status)
VALUES (1, 'IBE+', 'S01', '/shopping/search', 5, 0.50, 1),
       (2, 'IBE+', 'P01', '/pricing', 10, 0.20, 1),
       (3, 'IBE+', 'B01', '/booking', 2, 1.00, 1)
ON DUPLICATE KEY UPDATE channelType = VALUES(channelType), interfaceNo = VALUES(interfaceNo),
  interfaceUrl = VALUES(interfaceUrl), rateLimit = VALUES(rateLimit), cache = VALUES(cache),
  status = VALUES(status);
