/**
 * Preload (`node --import clock-skew.mjs …`, set through NODE_OPTIONS for one container only)
 * that runs this process's wall clock CHAOS_CLOCK_SKEW_MS ahead (positive) or behind
 * (negative): `Date.now()`, `new Date()` and `Date()`. The monotonic clock
 * (`performance.now()`, timers) is left alone, as on a machine whose NTP is off.
 */
const skewMs = Number(process.env.CHAOS_CLOCK_SKEW_MS ?? '0');

if (Number.isFinite(skewMs) && skewMs !== 0) {
  const RealDate = Date;
  const realNow = RealDate.now.bind(RealDate);
  const SkewedDate = function (this: unknown, ...args: unknown[]) {
    if (!new.target) return new RealDate(realNow() + skewMs).toString();
    return args.length === 0
      ? new RealDate(realNow() + skewMs)
      : Reflect.construct(RealDate, args, new.target);
  } as unknown as DateConstructor;
  Object.defineProperties(SkewedDate, {
    prototype: { value: RealDate.prototype },
    now: { value: () => realNow() + skewMs },
    parse: { value: RealDate.parse },
    UTC: { value: RealDate.UTC },
  });
  globalThis.Date = SkewedDate;
}
