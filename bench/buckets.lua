-- wrk: GET /ibe/b0 .. /ibe/b99 in turn (bench/run.sh's T2B and T2K: 100 rules, one bucket each).
local i = 0
request = function()
  i = (i + 1) % 100
  return wrk.format("GET", "/ibe/b" .. i)
end
