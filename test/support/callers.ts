/** Callers the handler tests name, as a Function URL's request context carries them (IAM ARNs). */

/** A service: the connections that restrict their callers to `orders-*` admit it. */
export const ORDERS_ROLE = 'arn:aws:sts::123456789012:assumed-role/orders-service/i-0abc';
/** An operator: `BROKER_OPERATOR_CALLERS` of `platform-*` admits it. */
export const OPERATOR = 'arn:aws:sts::123456789012:assumed-role/platform-oncall/alice';
