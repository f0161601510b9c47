"""Each query's arrivals, forecast from its own history (issue 56): a recurring profile with level
and trend (:mod:`.profile`), learnt online, checked against the arrivals that came and applied only
while its recent error is within ``forecast.maxError`` (:mod:`.forecasts`)."""

from .forecasts import ArrivalForecasts, QueryForecast
from .profile import SeasonalProfile, detect_period

__all__ = ["ArrivalForecasts", "QueryForecast", "SeasonalProfile", "detect_period"]
